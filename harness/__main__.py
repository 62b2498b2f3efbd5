"""`python -m harness` runs the beir-harness command line."""

from harness.cli import main

if __name__ == "__main__":
    main()
