"""Reading and driving the workbench app in a JupyterLab page, as the browser tests share it: the
app's output area, its tabs and buttons, and the tritonservers a test's folder left running."""

from __future__ import annotations

from pathlib import Path

__all__ = ["workbench_of", "open_tab", "button", "running_servers"]


def workbench_of(page):
    """The output area that shows the app (the first with a tab bar)."""
    return page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab")).first


def open_tab(workbench, title: str) -> None:
    workbench.locator(f".lm-TabBar-tab:has(.lm-TabBar-tabLabel:text-is('{title}'))").first.click()


def button(workbench, text: str):
    """The visible button whose label holds ``text``."""
    return workbench.locator("button.widget-button:visible", has_text=text).first


def running_servers(folder: Path) -> list[str]:
    """``pid: command line`` of every tritonserver whose command line names ``folder``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "tritonserver" in cmdline and str(folder) in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found
