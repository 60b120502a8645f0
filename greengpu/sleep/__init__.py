"""Lever 2, sleep and wake: which idle nodes sleep (`suspends`), which sleeping nodes wake (`sleep_wake`),
whether work waits and the levers have slack (`work_waiting`, `headroom`, `arrivals`), and whether a wake
worked (`wake_verify`). Pure: no I/O."""
