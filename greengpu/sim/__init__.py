"""The simulator body: trace readers, discrete-event replay, simulated nodes."""
