"""The test suite itself: where `make test`'s time goes (per test, per fixture, compiling
against running, subprocesses, the workers' balance)."""
