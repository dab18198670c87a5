"""Code versions of training runs, stored without ever touching the user's git repository.

Each run's code is snapshotted into a private bare repository at ``<store_dir>/versions.git``
(tracked + untracked-not-ignored files inside git, a filtered folder walk outside it); the
snapshot's tree hash is the version id. A version can be listed, read, or materialised into
a scratch folder for replay. The only write ever made to the user's ``.git/`` is the opt-in
:func:`ensure_excluded` line in ``info/exclude``.
"""

from ._git import VersionError
from .object_store import list_files, materialize, read_file
from .select import SkippedFile
from .snapshot import Snapshot, snapshot
from .userrepo import ensure_excluded, find_git_toplevel

__all__ = [
    "Snapshot",
    "SkippedFile",
    "VersionError",
    "ensure_excluded",
    "find_git_toplevel",
    "list_files",
    "materialize",
    "read_file",
    "snapshot",
]
