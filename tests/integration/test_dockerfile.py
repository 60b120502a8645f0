"""The Dockerfile of the image the manifests name (greengpu/greengpu:0.1.0), checked without a container
runtime (CI cannot pull a base image): its lint rules as assertions (hadolint is not available here), then
its build stage's COPY and pip install steps run for real in a fresh virtual environment in a temporary
directory, and its ENTRYPOINT run from what that install produced. The apt-get step (dbus-bin, for the
agent's node-local suspend) needs the base image's package manager and is only linted.

The install reuses pip's configured local wheels, so it takes tens of seconds, not minutes."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
IMAGE = "greengpu/greengpu:0.1.0"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (a FROM starts one)."""
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def test_the_dockerfile_follows_the_lint_rules() -> None:
    steps = instructions()
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)
    # A pinned base: an exact Python patch release on a named Debian release, never a floating tag.
    for word, rest in steps:
        if word == "FROM":
            image = rest.split()[0]
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
            assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image
    assert not [r for w, r in steps if w == "ADD"], "COPY, never ADD (no URLs, no archives unpacked)"
    copies = [r for w, r in steps if w == "COPY"]
    sources = {s for r in copies if not r.startswith("--from") for s in r.split()[:-1]}
    assert sources == {"pyproject.toml", "README.md", "greengpu"}, sources  # only what the package needs
    final = stages()[-1]
    users = [r for w, r in final if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), users  # non-root by default
    assert any(w == "HEALTHCHECK" for w, _ in final)
    assert json.loads(next(r for w, r in final if w == "ENTRYPOINT")) == ["greengpu"]  # exec form
    for word, rest in steps:
        if word == "RUN" and "apt-get install" in rest:
            assert "--no-install-recommends" in rest and "rm -rf /var/lib/apt/lists/*" in rest
        if word == "RUN" and "pip install" in rest:
            assert "--no-cache-dir" in rest
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert ignored and "*" in ignored  # the build context is the three paths copied, nothing else


def test_the_manifests_run_this_image_and_probe_it() -> None:
    """The documented probe: every container of this image in deploy/kubernetes has a liveness probe."""
    containers = []
    for path in sorted((REPO / "deploy" / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            containers += [c for c in spec.get("containers", []) if c.get("image") == IMAGE]
    assert len(containers) >= 2  # the daemon and the agent
    for container in containers:
        assert container.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz", container["name"]


def test_the_install_and_entrypoint_steps_run_in_a_fresh_environment(tmp_path: Path) -> None:
    build = stages()[0]
    workdir = tmp_path / "src"
    workdir.mkdir()
    for word, rest in build:
        if word == "COPY":
            *sources, target = rest.split()
            for source in sources:
                destination = workdir / (Path(source).name if target in ("./", ".") else target)
                if (REPO / source).is_dir():
                    shutil.copytree(REPO / source, destination,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(REPO / source, destination)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    prefix = tmp_path / "install"
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    env.pop("PYTHONPATH", None)
    for word, rest in build:
        if word == "RUN":
            command = rest.replace("/install", str(prefix))
            assert shlex.split(command)[:4] == ["python", "-m", "pip", "install"], command
            done = subprocess.run(["sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True,
                                  timeout=600, check=False)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # COPY --from=build /install /usr/local, then the ENTRYPOINT: here the prefix is put on the paths instead.
    site = next(prefix.glob("lib/python3*/site-packages"))
    run_env = {**env, "PATH": f"{prefix / 'bin'}:{env['PATH']}", "PYTHONPATH": str(site)}
    entrypoint = json.loads(next(r for w, r in stages()[-1] if w == "ENTRYPOINT"))
    command = shlex.split(next(r for w, r in stages()[-1] if w == "CMD").replace("[", "").replace("]", "")
                          .replace(",", " ").replace('"', ""))
    for args in (command, ["daemon", "--help"], ["agent", "--help"]):
        shown = subprocess.run([*entrypoint, *args], env=run_env, capture_output=True, text=True, timeout=60,
                               cwd=tmp_path, check=False)
        assert shown.returncode == 0, shown.stderr
        assert "Usage: greengpu" in shown.stdout
    assert shutil.which("greengpu", path=run_env["PATH"]) == str(prefix / "bin" / "greengpu")
    kube = subprocess.run([str(venv / "bin" / "python"), "-c", "import kubernetes, greengpu; print(greengpu.__file__)"],
                          env=run_env, capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert kube.returncode == 0 and kube.stdout.startswith(str(site)), kube.stderr  # installed, not the checkout
