"""`ensemble-bo` and `python -m ensemble_bo`: the project's commands.

`ensemble-bo rerun ...`, `ensemble-bo scheduled ...`, `ensemble-bo verify-model
...` and `ensemble-bo convert-pool ...` are the commands of cli.py;
`ensemble-bo --help` lists them; anything else is `kedro run`
(`ensemble-bo --pipelines=segor`).
"""

import sys
from pathlib import Path
from typing import Any

from kedro.framework.cli.utils import find_run_command
from kedro.framework.project import configure_project


def main(*args, **kwargs) -> Any:
    package_name = Path(__file__).parent.name
    configure_project(package_name)

    interactive = hasattr(sys, "ps1")
    kwargs["standalone_mode"] = not interactive

    from ensemble_bo.cli import cli  # noqa: PLC0415 - after configure_project

    arguments = list(args[0]) if args else sys.argv[1:]
    if arguments[:1] in (["--help"], ["-h"]):
        return cli.main(["--help"], prog_name="ensemble-bo", **kwargs)
    if arguments and arguments[0] in cli.commands and arguments[0] != "run":
        return cli.main(arguments, prog_name="ensemble-bo", **kwargs)
    run = find_run_command(package_name)
    return run(*args, **kwargs)


if __name__ == "__main__":
    main()
