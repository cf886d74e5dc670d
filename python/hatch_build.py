"""The wheel's build hook: bundles libvramfit.so (the source tree's build/, or the file
$VRAMFIT_LIBRARY names) into vramfit/lib/ and tags the wheel for this platform, since the
library is machine code; without a built library the wheel stays pure Python and the
binding finds the library at run time (binding.library_path)."""
from __future__ import annotations

import os
import sysconfig
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class LibraryHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return  # an editable install runs from the source tree, which finds build/
        library = os.environ.get("VRAMFIT_LIBRARY") or os.path.join(self.root, "..", "build",
                                                                    "libvramfit.so")
        if not os.path.isfile(library):
            return
        build_data["force_include"][library] = "vramfit/lib/libvramfit.so"
        build_data["pure_python"] = False
        # ctypes loads the library: any Python 3 of this platform can (auditwheel repair
        # then names the manylinux policy the library meets and grafts what it links).
        build_data["tag"] = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
