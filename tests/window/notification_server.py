#!/usr/bin/python3
"""A minimal desktop notification server for the window tests: owns `org.freedesktop.Notifications`
on the session bus (the test's private one, from `dbus-run-session`), answers the calls of the
freedesktop notification specification, and appends each `Notify` call as one JSON line to the
file given as argument. It has the `Inhibited` property (Do-Not-Disturb, as KDE Plasma's server
has) and a test-only `SetInhibited(b)` method on `test.stagewhisper.Control`.

    dbus-run-session -- /usr/bin/python3 notification_server.py calls.jsonl

Needs Debian's python3-dbus and python3-gi (the system python). Prints `ready` on stdout once the
name is owned.
"""

import json
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

IFACE = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"


class Server(dbus.service.Object):
    def __init__(self, bus, out):
        super().__init__(bus, PATH)
        self.out = out
        self.next_id = 1
        self.inhibited = False

    @dbus.service.method(IFACE, in_signature="susssasa{sv}i", out_signature="u")
    def Notify(self, app_name, replaces_id, app_icon, summary, body, actions, hints, timeout):
        nid = self.next_id
        self.next_id += 1
        rec = {"id": nid, "app_name": str(app_name), "summary": str(summary), "body": str(body)}
        with open(self.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return dbus.UInt32(nid)

    @dbus.service.method(IFACE, in_signature="", out_signature="as")
    def GetCapabilities(self):
        return ["body", "actions"]

    @dbus.service.method(IFACE, in_signature="", out_signature="ssss")
    def GetServerInformation(self):
        return ("sw-test-notifications", "stagewhisper-tests", "1.0", "1.2")

    @dbus.service.method(IFACE, in_signature="u", out_signature="")
    def CloseNotification(self, nid):
        pass

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="ss", out_signature="v")
    def Get(self, iface, prop):
        if iface == IFACE and prop == "Inhibited":
            return dbus.Boolean(self.inhibited)
        raise dbus.exceptions.DBusException("no such property", name="org.freedesktop.DBus.Error.UnknownProperty")

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return {"Inhibited": dbus.Boolean(self.inhibited)} if iface == IFACE else {}

    @dbus.service.method("test.stagewhisper.Control", in_signature="b", out_signature="")
    def SetInhibited(self, value):
        self.inhibited = bool(value)


def main():
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SessionBus()
    name = dbus.service.BusName(IFACE, bus, do_not_queue=True)
    server = Server(bus, sys.argv[1])
    print("ready", flush=True)
    GLib.MainLoop().run()
    del name, server


if __name__ == "__main__":
    main()
