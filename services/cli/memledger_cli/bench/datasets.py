"""Where the benches' evaluation data lies: read in place at run time, never copied."""

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[4]


def located(option: str | None, env: str, folder: str, file: str, flag: str) -> Path:
    """The directory holding ``file``: ``option`` (the command's ``flag``), else ``$env``, else
    ``../shared/data/<folder>`` beside the repository; an error naming all three if ``file``
    is not there."""
    chosen = option or os.environ.get(env) or str(_REPO / ".." / "shared" / "data" / folder)
    path = Path(chosen).expanduser()
    if not (path / file).is_file():
        raise SystemExit(f"bench retrieval: {path / file} not found. Pass {flag} DIR or set "
                         f"{env} to the directory holding {file}.")
    return path
