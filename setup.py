"""Package discovery for setuptools (everything else is in pyproject.toml).

Every ``ddpdoctor.*`` package is found by ``find_packages``, so a new one needs no list to
be kept. ``playbooks/`` sits at the top of the repository (one Markdown file per finding id)
and installs as ``ddpdoctor.playbooks``: that mapping is the one thing discovery cannot see.
"""

from setuptools import find_packages, setup

MAPPED = {"ddpdoctor.playbooks": "playbooks"}


def packages() -> list[str]:
    return sorted(find_packages(include=["ddpdoctor", "ddpdoctor.*"]) + list(MAPPED))


if __name__ == "__main__":
    setup(packages=packages(), package_dir=MAPPED)
