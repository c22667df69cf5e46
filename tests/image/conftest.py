"""The image as a user builds and pushes it (`make image`, `make image-push`)."""

import subprocess

from testbed import builds, image


def version_line(argv, match="") -> str:
    """The first line of what `argv` prints that holds `match`."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError as e:
        return f"MISSING ({e})"
    lines = (out.stdout or out.stderr).strip().splitlines()
    return next((line for line in lines if match in line), "MISSING")


def pytest_report_header(config):
    try:
        actionlint = version_line([builds.actionlint_binary(), "-version"])
    except FileNotFoundError as e:
        actionlint = f"MISSING ({e})"
    return [
        f"image tests: {image.version()}",
        f"image tests: {version_line(['qemu-aarch64-static', '--version'])}",
        f"image tests: {version_line(['docker-registry', '--version'])}",
        f"image tests: actionlint {actionlint}",
        f"image tests: shellcheck {version_line(['shellcheck', '--version'], 'version:')}",
    ]
