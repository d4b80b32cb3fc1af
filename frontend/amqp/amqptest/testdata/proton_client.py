#!/usr/bin/python3
"""Interop client for the quorumbus AMQP engine, built on Apache Qpid Proton.

Runs ONE scenario against a running amqptest.Broker and exits 0 on success,
1 with a message on stderr on failure, 2 on bad usage. proton_test.go in the
parent directory drives it; run by hand with

    /usr/bin/python3 proton_client.py --url amqp://127.0.0.1:PORT --scenario NAME

Set PN_TRACE_FRM=1 to see every frame on stderr.

Every blocking call has a timeout, so the script cannot hang: the
BlockingConnection is built with --timeout as its default, and the
event-driven scenarios schedule a timer that fails the run.
"""

import argparse
import collections
import contextlib
import hashlib
import os
import sys
import time
import traceback

from proton import Delivery, Endpoint, Link, Message, SASL, Timeout
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container, LinkOption
from proton.utils import BlockingConnection, BlockingReceiver, BlockingSender, LinkDetached


class Failure(Exception):
    """A check failed."""


def check(cond, fmt, *args):
    if not cond:
        raise Failure(fmt % args if args else fmt)


def log(fmt, *args):
    print("proton_client: " + (fmt % args if args else fmt), file=sys.stderr, flush=True)


class RcvSettleSecond(LinkOption):
    """Receiver settle mode second: peek-lock, as Service Bus clients use
    it. The receiver states its outcome unsettled, the sender settles, then
    the receiver settles."""

    def apply(self, link):
        link.rcv_settle_mode = Link.RCV_SECOND

    def test(self, link):
        return link.is_receiver


# --- helpers for the blocking API -------------------------------------------

@contextlib.contextmanager
def connection(args, **kw):
    """A BlockingConnection (SASL ANONYMOUS unless sasl_enabled=False),
    closed at the end. After a failure it is closed best-effort with a short
    timeout: BlockingConnection.close ignores a dead socket and would wait
    out the whole timeout, hiding the real error."""
    if kw.get("sasl_enabled", True):
        kw.setdefault("allowed_mechs", "ANONYMOUS")
    conn = BlockingConnection(args.url, timeout=args.timeout, **kw)
    try:
        yield conn
    except BaseException:
        conn.timeout = 2
        try:
            conn.close()
        except Exception as e:
            log("closing after the failure: %s: %s", type(e).__name__, e)
        raise
    conn.close()


def sender_on(conn, session, address, options=None):
    """A BlockingSender on an explicit session."""
    return BlockingSender(conn, conn.container.create_sender(session, address, options=options))


class Collector(MessagingHandler):
    """What BlockingConnection.create_receiver uses internally (its Fetcher
    is private): queues incoming messages for BlockingReceiver."""

    def __init__(self, conn, prefetch):
        super().__init__(prefetch=prefetch, auto_accept=False)
        self.conn = conn
        self.incoming = collections.deque()
        self.unsettled = collections.deque()

    def on_message(self, event):
        self.incoming.append((event.message, event.delivery))
        self.conn.container.yield_()

    def on_link_error(self, event):
        if event.link.state & Endpoint.LOCAL_ACTIVE:
            event.link.close()
            raise LinkDetached(event.link)

    @property
    def has_message(self):
        return len(self.incoming)

    def pop(self):
        msg, dlv = self.incoming.popleft()
        if not dlv.settled:
            self.unsettled.append(dlv)
        return msg

    def settle(self, state=None):
        dlv = self.unsettled.popleft()
        if state:
            dlv.update(state)
        dlv.settle()


def receiver_on(conn, session, address, credit, options=None):
    """A BlockingReceiver on an explicit session (create_receiver always
    uses the connection's default session)."""
    fetcher = Collector(conn, credit)
    link = conn.container.create_receiver(session, address, handler=fetcher, options=options)
    return BlockingReceiver(conn, link, fetcher, credit=credit)


def receive(rcv, timeout):
    """Receive one message; also returns its delivery (None if presettled)."""
    before = len(rcv.fetcher.unsettled)
    msg = rcv.receive(timeout=timeout)
    dlv = rcv.fetcher.unsettled[-1] if len(rcv.fetcher.unsettled) > before else None
    return msg, dlv


def body_eq(got, want):
    if isinstance(want, bytes):
        return isinstance(got, (bytes, memoryview)) and bytes(got) == want
    return type(got) is type(want) and got == want


# --- scenarios ----------------------------------------------------------------

def sample_messages(n):
    """Messages with different body types: amqp-value string, data section,
    amqp-value map, amqp-value list, amqp-sequence."""
    out = []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            body, inferred, name = "hello %d" % i, False, "string"
        elif kind == 1:
            body, inferred, name = bytes([i, 0, 255, 10, 13]) + b"binary", True, "data"
        elif kind == 2:
            body, inferred, name = {"i": i, "s": "x" * i, "nested": {"ok": True}, "none": None}, False, "map"
        elif kind == 3:
            body, inferred, name = [i, "a", True, 1.5, b"\x01\x02"], False, "list"
        else:
            body, inferred, name = [i, "seq"], True, "sequence"
        out.append(Message(body=body, inferred=inferred, subject="s%d" % i, id="m%d" % i,
                           properties={"i": i, "kind": name, "neg": -i, "f": i / 4.0}))
    return out


def scenario_sasl_anonymous(args):
    with connection(args) as conn:
        sasl = conn.conn.transport.sasl()
        check(sasl.outcome == SASL.OK, "SASL outcome %s, want OK", sasl.outcome)
        check(sasl.mech == "ANONYMOUS", "SASL mechanism %r, want ANONYMOUS", sasl.mech)
        log("SASL %s ok, remote container %r", sasl.mech, conn.conn.remote_container)

        addr = "proton-q1"
        want = sample_messages(10)
        snd = conn.create_sender(addr)
        for i, m in enumerate(want):
            d = snd.send(m)
            check(d.remote_state == Delivery.ACCEPTED, "send %d: outcome %s", i, d.remote_state)
        snd.close()

        rcv = conn.create_receiver(addr, credit=3, options=RcvSettleSecond())
        check(rcv.link.remote_rcv_settle_mode == Link.RCV_SECOND,
              "broker answered rcv-settle-mode %s, want second", rcv.link.remote_rcv_settle_mode)
        for i, w in enumerate(want):
            m, d = receive(rcv, args.timeout)
            check(d is not None, "message %d arrived settled; want unsettled (peek-lock)", i)
            check(body_eq(m.body, w.body), "message %d: body %r, want %r", i, m.body, w.body)
            check(m.inferred == w.inferred, "message %d: inferred %s, want %s", i, m.inferred, w.inferred)
            check(m.properties == w.properties, "message %d: properties %r, want %r", i, m.properties, w.properties)
            check(m.subject == w.subject and m.id == w.id, "message %d: subject/id %r/%r", i, m.subject, m.id)
            # Accept without settling; the broker must settle first.
            d.update(Delivery.ACCEPTED)
            conn.wait(lambda: d.settled, timeout=args.timeout,
                      msg="waiting for the broker to settle message %d (rcv-settle-mode second)" % i)
            check(d.remote_state == Delivery.ACCEPTED, "message %d: broker settled with state %s, want ACCEPTED",
                  i, d.remote_state)
            d.settle()
            rcv.fetcher.unsettled.remove(d)
        # Closing the link waits for the broker's detach, by which time it
        # has seen every disposition: unaccepted messages would be requeued.
        rcv.close()


def scenario_no_sasl(args):
    with connection(args, sasl_enabled=False) as conn:
        snd = conn.create_sender("proton-nosasl")
        snd.send(Message(body="no sasl"))
        snd.close()
        rcv = conn.create_receiver("proton-nosasl", credit=1)
        m, d = receive(rcv, args.timeout)
        check(m.body == "no sasl", "body %r", m.body)
        check(d is not None, "message arrived settled")
        rcv.accept()
        rcv.close()


def scenario_presettled(args):
    with connection(args) as conn:
        addr = "proton-rd"
        snd = conn.create_sender(addr, options=AtMostOnce())
        check(snd.link.remote_snd_settle_mode == Link.SND_SETTLED,
              "broker answered snd-settle-mode %s, want settled", snd.link.remote_snd_settle_mode)
        # With snd-settle-mode settled proton sends every transfer with
        # settled=true and send() does not wait for an outcome.
        for i in range(100):
            snd.send(Message(body=b"%d" % i, inferred=True))
        snd.close()  # the detach round trip means all 100 transfers arrived

        rcv = conn.create_receiver(addr, credit=10, options=AtMostOnce())
        check(rcv.link.remote_snd_settle_mode == Link.SND_SETTLED,
              "broker answered snd-settle-mode %s, want settled", rcv.link.remote_snd_settle_mode)
        for i in range(100):
            m, d = receive(rcv, args.timeout)
            check(d is None, "message %d arrived unsettled on an at-most-once link", i)
            check(bytes(m.body) == b"%d" % i, "message %d out of order: %r", i, m.body)
        rcv.close()


def scenario_release(args):
    with connection(args) as conn:
        rcv = conn.create_receiver("proton-rel", credit=1)
        m, d = receive(rcv, args.timeout)
        check(m.body == "x", "first delivery: body %r, want 'x'", m.body)
        rcv.release(delivered=False)  # released
        m, d = receive(rcv, args.timeout)
        check(m.body == "x", "after release: body %r, want 'x'", m.body)
        rcv.release(delivered=True)  # modified
        m, d = receive(rcv, args.timeout)
        check(m.body == "x", "after modified: body %r, want 'x'", m.body)
        rcv.accept()
        rcv.close()


def scenario_large(args):
    size = 10 << 20
    payload = bytes((i * 7) & 0xFF for i in range(256)) * (size // 256)
    digest = hashlib.sha256(payload).hexdigest()
    # A small max-frame-size of our own makes the broker split the message
    # too, not only us (proton announces no limit by default).
    with connection(args, max_frame_size=16384) as conn:
        snd = conn.create_sender("proton-big")
        check(snd.link.remote_max_message_size == 16 << 20,
              "broker announced max-message-size %d, want %d", snd.link.remote_max_message_size, 16 << 20)
        t0 = time.monotonic()
        for _ in range(2):
            d = snd.send(Message(body=payload, inferred=True))
            check(d.remote_state == Delivery.ACCEPTED, "outcome %s", d.remote_state)
        snd.close()
        log("sent 2 x %d bytes in %.2fs", size, time.monotonic() - t0)

        rcv = conn.create_receiver("proton-big", credit=1)
        for i in range(2):
            m, d = receive(rcv, args.timeout)
            got = bytes(m.body)
            check(len(got) == size, "message %d: %d bytes, want %d", i, len(got), size)
            check(hashlib.sha256(got).hexdigest() == digest, "message %d: 10 MB message corrupted", i)
            rcv.accept()
        rcv.close()


def scenario_many_links(args):
    nsess, nlinks, nmsgs = 4, 4, 20
    with connection(args) as conn:
        sessions = []
        for _ in range(nsess):
            ssn = conn.conn.session()
            ssn.open()
            sessions.append(ssn)
        senders = []
        for si, ssn in enumerate(sessions):
            for li in range(nlinks):
                addr = "proton-s%d-l%d" % (si, li)
                senders.append((addr, ssn, sender_on(conn, ssn, addr)))
        # Interleave the links: every message goes out before any outcome
        # comes back.
        dlvs = []
        for i in range(nmsgs):
            for addr, _, snd in senders:
                dlvs.append((addr, i, snd.link.send(Message(body="%s #%d" % (addr, i)))))
        conn.wait(lambda: all(d.remote_state for _, _, d in dlvs), timeout=args.timeout,
                  msg="waiting for %d outcomes" % len(dlvs))
        for addr, i, d in dlvs:
            check(d.remote_state == Delivery.ACCEPTED, "%s #%d: outcome %s", addr, i, d.remote_state)
            d.settle()
        receivers = [(addr, receiver_on(conn, ssn, addr, nmsgs)) for addr, ssn, _ in senders]
        conn.wait(lambda: all(r.fetcher.has_message == nmsgs for _, r in receivers), timeout=args.timeout,
                  msg="waiting for %d messages on each of %d receivers" % (nmsgs, len(receivers)))
        for addr, rcv in receivers:
            for i in range(nmsgs):
                m, _ = receive(rcv, args.timeout)
                check(m.body == "%s #%d" % (addr, i), "%s: message %d: got %r", addr, i, m.body)
                rcv.accept()
        for addr, ssn, snd in senders:
            snd.close()
        for addr, rcv in receivers:
            rcv.close()
        for ssn in sessions:
            ssn.close()
        conn.wait(lambda: all(not (s.state & Endpoint.REMOTE_ACTIVE) for s in sessions),
                  timeout=args.timeout, msg="ending sessions")


def expect_refused(what, attach):
    try:
        link = attach()
    except Exception as e:  # LinkDetached, or LinkException for a mismatch
        cond = getattr(e, "condition", None)
        if cond is None and getattr(e, "link", None) is not None and e.link.remote_condition:
            cond = e.link.remote_condition.name
        check(cond == "amqp:not-found", "%s on 'nope': refused with %r (%s: %s), want amqp:not-found",
              what, cond, type(e).__name__, e)
        log("%s refused as expected: %s", what, e)
        return
    raise Failure("%s on 'nope' was attached (remote terminus %r); want refusal with amqp:not-found"
                  % (what, link.link.remote_target.address if link.is_sender else link.link.remote_source.address))


def scenario_refused(args):
    with connection(args) as conn:
        expect_refused("sender", lambda: conn.create_sender("nope"))
        expect_refused("receiver", lambda: conn.create_receiver("nope", credit=1))
        check(conn.conn.state & Endpoint.REMOTE_ACTIVE, "connection not open after the refusals")
        # The connection and its session still work.
        snd = conn.create_sender("yes")
        d = snd.send(Message(body="ok"))
        check(d.remote_state == Delivery.ACCEPTED, "outcome %s", d.remote_state)
        snd.close()


def scenario_abrupt(args):
    conn = BlockingConnection(args.url, timeout=args.timeout, allowed_mechs="ANONYMOUS")
    rcv = conn.create_receiver("proton-abrupt", credit=1)
    m, d = receive(rcv, args.timeout)
    check(d is not None, "message arrived settled")
    log("received %r unsettled; exiting without closing", m.body)
    sys.stdout.flush()
    sys.stderr.flush()
    # No detach, no end, no close: the kernel closes the socket.
    os._exit(0)


def scenario_idle(args):
    with connection(args, heartbeat=2) as conn:
        t = conn.conn.transport
        check(abs(t.remote_idle_timeout - 1.5) < 0.01, "broker announced idle-time-out %.3fs, want 1.5s",
              t.remote_idle_timeout)
        snd = conn.create_sender("proton-ka")
        frames_in, frames_out = t.frames_input, t.frames_output
        # Keep the event loop turning (and so the heartbeats flowing) while
        # the application does nothing for longer than both idle limits.
        # heartbeat=2 makes proton announce idle-time-out 1s (half its
        # local limit), so the broker owes us a frame every 0.5s.
        try:
            conn.wait(lambda: False, timeout=4)
        except Timeout:
            pass
        log("idle 4s: %d frames in (the broker's keep-alives), %d out (ours)", t.frames_input - frames_in,
            t.frames_output - frames_out)
        check(t.frames_input - frames_in >= 2, "the broker sent %d frames in 4s; want keep-alives every 0.5s",
              t.frames_input - frames_in)
        d = snd.send(Message(body="still here"))
        check(d.remote_state == Delivery.ACCEPTED, "outcome %s", d.remote_state)
        snd.close()


# --- event-driven scenarios -------------------------------------------------

class EventScenario(MessagingHandler):
    """Base for reactor scenarios: a deadline timer, and failures that stop
    the reactor and surface from main."""

    def __init__(self, args, **kw):
        super().__init__(**kw)
        self.args = args
        self.error = None
        self.done = False
        self.conn = None
        self.timer = None

    def on_start(self, event):
        self.container = event.container
        self.timer = event.container.schedule(self.args.timeout, self)
        self.conn = event.container.connect(self.args.url, allowed_mechs="ANONYMOUS", reconnect=False)
        self.started(event)

    def started(self, event):
        pass

    def on_timer_task(self, event):
        self.fail("timed out after %ss: %s" % (self.args.timeout, self.progress()))

    def progress(self):
        return ""

    def fail(self, msg):
        if self.error is None and not self.done:
            self.error = msg
        self.stop()

    def succeed(self):
        self.done = True
        if self.timer:
            self.timer.cancel()
        self.conn.close()

    def stop(self):
        if self.timer:
            self.timer.cancel()
        if self.conn is not None:
            self.conn.close()
        self.container.stop()

    def on_transport_error(self, event):
        c = event.transport.condition
        self.fail("transport error: %s" % c)

    def on_connection_error(self, event):
        self.fail("connection closed by the broker: %s" % event.connection.remote_condition)

    def on_session_error(self, event):
        self.fail("session ended by the broker: %s" % event.session.remote_condition)

    def on_link_error(self, event):
        self.fail("link %s detached by the broker: %s" % (event.link.name, event.link.remote_condition))

    def on_disconnected(self, event):
        if not self.done:
            self.fail("disconnected: %s" % (event.transport.condition if event.transport else "?"))

    def run(self):
        Container(self).run()
        if self.error:
            raise Failure(self.error)
        check(self.done, "the reactor stopped before the scenario finished: %s" % self.progress())


class Drain(EventScenario):
    """5 credits on a queue holding one message: the message arrives, then
    a drain request must be answered with the 4 unused credits, and a second
    drain on the empty queue with all 3 it asks for."""

    def __init__(self, args):
        super().__init__(args, prefetch=0, auto_accept=False)
        self.stage = "attaching"
        self.received = 0
        self.drained = 0

    def progress(self):
        r = getattr(self, "receiver", None)
        return "stage %s, received %d, credit %s, drained %d" % (
            self.stage, self.received, r.credit if r else "?", self.drained)

    def started(self, event):
        self.receiver = event.container.create_receiver(self.conn, "proton-d")

    def on_link_opened(self, event):
        if event.receiver == self.receiver and self.stage == "attaching":
            self.stage = "receiving"
            self.receiver.flow(5)

    def on_message(self, event):
        self.received += 1
        if self.received > 1:
            self.fail("received %d messages; the queue held 1" % self.received)
            return
        check(event.message.body is True, "body %r, want True", event.message.body)
        self.accept(event.delivery)
        check(self.receiver.credit == 4, "credit %d after one message, want 4", self.receiver.credit)
        self.stage = "drain-1"
        self.receiver.drain(0)  # drain the 4 we hold

    def on_link_flow(self, event):
        r = self.receiver
        if event.link != r:
            return
        self.drained += r.drained()
        if self.stage == "drain-1" and r.credit == 0:
            if self.drained != 4:
                self.fail("first drain: %d credits drained, want 4" % self.drained)
                return
            r.drain_mode = False
            self.drained = 0
            self.stage = "drain-2"
            r.drain(3)  # fresh credit, nothing to send
        elif self.stage == "drain-2" and r.credit == 0:
            if self.drained != 3:
                self.fail("second drain: %d credits drained, want 3" % self.drained)
                return
            r.drain_mode = False
            self.stage = "closing"
            r.close()

    def on_link_closed(self, event):
        if event.link == self.receiver and self.stage == "closing":
            self.succeed()


class Pipelined(EventScenario):
    """5000 1 KiB messages as fast as credit allows; all must be accepted."""

    N = 5000

    def __init__(self, args):
        super().__init__(args)
        self.sent = 0
        self.accepted = 0
        self.payload = bytes(range(256)) * 4
        self.flows = 0

    def progress(self):
        return "sent %d, accepted %d, flows %d" % (self.sent, self.accepted, self.flows)

    def started(self, event):
        self.sender = event.container.create_sender(self.conn, "proton-pipe")
        self.t0 = time.monotonic()

    def on_sendable(self, event):
        self.flows += 1
        s = event.sender
        while s.credit > 0 and self.sent < self.N:
            s.send(Message(body=self.payload, inferred=True, properties={"n": self.sent}))
            self.sent += 1

    def on_accepted(self, event):
        self.accepted += 1
        if self.accepted == self.N:
            log("%d accepted in %.2fs, %d sendable events", self.N, time.monotonic() - self.t0, self.flows)
            self.sender.close()

    def on_link_closed(self, event):
        if event.link == self.sender and self.accepted == self.N:
            self.succeed()

    def on_rejected(self, event):
        self.fail("message rejected: %s" % event.delivery.remote.condition)

    def on_released(self, event):
        self.fail("message released")


SCENARIOS = {
    "sasl-anonymous": scenario_sasl_anonymous,
    "no-sasl": scenario_no_sasl,
    "presettled": scenario_presettled,
    "release": scenario_release,
    "large": scenario_large,
    "many-links": scenario_many_links,
    "refused": scenario_refused,
    "drain": lambda args: Drain(args).run(),
    "pipelined": lambda args: Pipelined(args).run(),
    "abrupt": scenario_abrupt,
    "idle": scenario_idle,
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="amqp://HOST:PORT")
    p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    p.add_argument("--timeout", type=float, default=20, help="seconds for any single wait")
    args = p.parse_args()
    t0 = time.monotonic()
    try:
        SCENARIOS[args.scenario](args)
    except Failure as e:
        print("FAIL %s: %s" % (args.scenario, e), file=sys.stderr, flush=True)
        return 1
    except Exception as e:
        traceback.print_exc()
        print("FAIL %s: %s: %s" % (args.scenario, type(e).__name__, e), file=sys.stderr, flush=True)
        return 1
    log("%s ok in %.2fs", args.scenario, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
