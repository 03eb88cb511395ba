"""`python -m fovea.bench`: the benchmark's entry point (see `fovea.bench.cli`)."""
from fovea.bench.cli import main

if __name__ == "__main__":
    main()
