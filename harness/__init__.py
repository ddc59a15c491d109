"""What the tests and the benchmarks share: real processes started and stopped on free
loopback ports (Prometheus, VictoriaMetrics, the bridges, llama.cpp's server and its
tiny model, the demo cluster), the canned and static pages they are pointed at, and
the fake NVML the CPU-only machine stands in for a GPU with. Not installed; it may
import the product and the demo (deploy/demo), never tests/ or bench/."""
