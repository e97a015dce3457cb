"""A real window manager inside the test's Xvfb display (Debian's openbox, with the settings of
openbox-rc.xml), and a user's pointer drags through xdotool, for what only a window manager
does: moving an undecorated window when the page asks to (`start_dragging` sends
_NET_WM_MOVERESIZE through GTK's begin_move_drag) and resizing it from its edge (Tauri's
runtime starts begin_resize_drag when a press lands in the 5 px border of an undecorated,
resizable window). Without a window manager both requests go unanswered.
"""

import subprocess
import time
from pathlib import Path

import run as w

RC = Path(__file__).resolve().parent / "openbox-rc.xml"
# After the button goes down, the time the request takes to reach the window manager (page →
# IPC → GTK → X client message) before the pointer moves: the window manager starts the move
# from where the pointer is when the request arrives, so a pointer that moved earlier would
# shorten the drag. A few milliseconds when idle; a generous bound for a loaded 2-core machine.
GRAB_WAIT = 1.0


def x(env, *args, check=True):
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=20, check=check).stdout


def wm_name(env):
    """The name of the window manager that manages the display (EWMH), or None."""
    out = x(env, "xprop", "-root", "-notype", "_NET_SUPPORTING_WM_CHECK", check=False)
    if "window id #" not in out:
        return None
    wid = out.split("window id #")[1].split()[0]
    name = x(env, "xprop", "-id", wid, "-notype", "_NET_WM_NAME", check=False)
    return name.split("=", 1)[1].strip().strip('"') if "=" in name else None


def start_openbox(env, procs, err_path):
    with open(err_path, "wb") as err:
        proc = procs.start(["openbox", "--sm-disable", "--config-file", str(RC)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    w.wait_for("openbox to manage the display", lambda: wm_name(env) == "Openbox", 15)
    return proc


def stop_openbox(env, proc):
    x(env, "openbox", "--exit", check=False)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def drag(env, start, end, steps=12):
    """Left button down at `start`, moved in steps to `end`, released: a user's drag."""
    x(env, "xdotool", "mousemove", str(start[0]), str(start[1]))
    time.sleep(0.2)
    x(env, "xdotool", "mousedown", "1")
    time.sleep(GRAB_WAIT)
    for i in range(1, steps + 1):
        px = start[0] + (end[0] - start[0]) * i // steps
        py = start[1] + (end[1] - start[1]) * i // steps
        x(env, "xdotool", "mousemove", str(px), str(py))
        time.sleep(0.03)
    time.sleep(0.3)
    x(env, "xdotool", "mouseup", "1")
