#!/usr/bin/env bash
# Mutation testing of greengpu's pure decision core, on demand (docs/TESTING.md), like the benchmarks:
# not part of the normal test run. Needs `pip install -e '.[mutation]'`.
#
#   tests/mutation/run.sh                          # every module of the pure core ([tool.mutmut])
#   tests/mutation/run.sh 'greengpu.energy.*'      # one package or module (mutant-name globs)
#
# mutmut copies the tree to ./mutants, runs the unit and property tests once to learn which tests
# reach which function, then runs only those tests against each mutant. Results are cached in
# ./mutants: a second run only tries mutants whose function or tests changed. The report at the end
# counts mutants listed in tests/mutation/equivalent.txt apart: no test can kill a mutant that
# behaves exactly like the original.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The hypothesis property tests run 1000 examples in the normal suite; 100 per mutant keeps the job
# to hours rather than days on a small machine.
export GREENGPU_PROPERTY_EXAMPLES="${GREENGPU_PROPERTY_EXAMPLES:-100}"
# Inside ./mutants the tests no longer sit beside the repository's data/ folder; point them at it.
export GREENGPU_PUBLIC_DATA="${GREENGPU_PUBLIC_DATA:-$(pwd)/data}"
# A mutant that loops while appending (a cut that never advances) would take the machine's memory
# before its CPU time runs out: 4 GiB of address space per process is ample for the tests, and a mutant
# that runs out fails its tests (killed) instead.
ulimit -v 4000000
start_s=$(date +%s)
status=0
nice -n 10 python3 -m mutmut run "$@" || status=$?
elapsed_s=$(( $(date +%s) - start_s ))
python3 tests/mutation/report.py --elapsed-s "$elapsed_s" "$@"
exit "$status"
