"""Project-wide tests: the layers of the code and the tests, the docs, CI and the make targets."""
