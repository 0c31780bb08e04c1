"""ddpdoctor's bootstrap: ``ddpdoctor run`` puts this directory first on PYTHONPATH.

It chains to the ``sitecustomize`` it shadows (if any), then, when ``DDPDOCTOR_WATCH=1``,
installs the zero-code-change watch (nothing is imported until the program imports torch).
Every failure is swallowed: this file must never break the program it starts.
"""


def _ddpdoctor_bootstrap() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    # 1. chain to the sitecustomize we shadow
    try:
        import importlib

        mine = sys.modules.get("sitecustomize")
        saved = list(sys.path)
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        try:
            del sys.modules["sitecustomize"]
            importlib.import_module("sitecustomize")
        except ImportError:
            if mine is not None:
                sys.modules["sitecustomize"] = mine
        finally:
            sys.path[:] = saved
    except Exception as e:
        sys.stderr.write(f"ddpdoctor: the shadowed sitecustomize failed: {e!r}\n")
    # 2. the watch
    if os.environ.get("DDPDOCTOR_WATCH", "").lower() not in ("1", "true", "yes", "on"):
        return
    try:
        try:
            import ddpdoctor  # noqa: F401
        except ImportError:  # the program runs in an environment without ddpdoctor
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(here))))
        from ddpdoctor.watch import autowatch

        autowatch.install()
    except Exception as e:
        sys.stderr.write(f"ddpdoctor: zero-code-change watch not installed: {e!r}\n")


_ddpdoctor_bootstrap()
del _ddpdoctor_bootstrap
