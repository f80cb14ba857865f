"""Scientific studies: scripts that answer a question about the methods on generated or published data
(known-answer checks, selection criteria against the truth, calibration of the synthetic presets).
Each runs as `python -m studies.NAME`; the benchmarks (timings) are in benchmarks/."""
