"""Package discovery (issue #17): every package under ddpdoctor/ installs without a list to
keep, and the check lives in one package. Fast; tests/functional/test_wheel.py builds the
real wheel."""

import importlib.util

from jobs import REPO


def _setup_module():
    spec = importlib.util.spec_from_file_location("ddpdoctor_setup", REPO / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # __name__ is not "__main__": setup() does not run
    return module


def test_every_package_folder_is_discovered(tmp_path):
    on_disk = {p.parent.relative_to(REPO).as_posix().replace("/", ".")
               for p in (REPO / "ddpdoctor").rglob("__init__.py")
               if "__pycache__" not in p.parts}
    found = set(_setup_module().packages())
    assert on_disk - found == set()
    assert "ddpdoctor.playbooks" in found and "ddpdoctor.check.probes" in found


def test_a_new_package_is_picked_up_without_editing_anything(tmp_path, monkeypatch):
    (tmp_path / "ddpdoctor" / "brand_new").mkdir(parents=True)
    (tmp_path / "ddpdoctor" / "__init__.py").write_text("")
    (tmp_path / "ddpdoctor" / "brand_new" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert "ddpdoctor.brand_new" in _setup_module().packages()


def test_no_check_module_is_left_outside_the_check_package():
    # nvml/ is not among them: the NVML reader is a shared library (check's probes and the
    # watch's live GPU metrics both read it; tests/unit/test_layers.py lists it)
    assert (REPO / "ddpdoctor" / "nvml" / "live.py").exists()
    stray = [name for name in ("preflight", "launcher", "busbw", "schedule",
                               "multinode", "analysis", "probes")
             if (REPO / "ddpdoctor" / f"{name}.py").exists()
             or (REPO / "ddpdoctor" / name).is_dir() or (REPO / name).is_dir()]
    assert stray == []
