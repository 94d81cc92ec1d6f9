"""`python -m kgroups` is the `kgroups` command."""

import sys

# kio registers strategies for its types with hypothesis when hypothesis can be imported
# (a development install has it, for the tests): the command never uses them, and the
# import costs ~0.13 s of every start, hundreds of times in a test run. None in
# sys.modules makes `import hypothesis` fail at once, which kio expects.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from kgroups.cli import main  # noqa: E402

main()
