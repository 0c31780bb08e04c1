"""`ddpdoctor run`: not built yet (see the open issue); exits 3 rather than pretend."""

from ddpdoctor.commands.common import not_implemented

command = not_implemented("run")
