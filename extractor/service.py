"""The extractor service: binlog in, THL out, one active instance per service.

Run order: take the ZooKeeper leader lock (a second instance waits as standby), make sure
the THL topic is usable, find the restart point (THL tail, trep_commit_seqno, ZooKeeper),
open a transactional producer (fencing any stale one), then stream. Kafka transactions close
only on source-transaction boundaries; the positions (trep_commit_seqno on the source, the
ZooKeeper mirror) move only after a Kafka commit.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import sqlalchemy as sa
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from extractor import binlog_fixes, row_decoder, table_map_cache
from extractor.binlog_connection import BinlogConnection
from extractor.binlog_position import BinlogPosition
from extractor.check import Checker
from extractor.config import ExtractorConfig
from extractor.errors import (
    BinlogPurgedError,
    ExtractorError,
    LeaderLost,
    SameServerId,
    ThlCommitUnknown,
    is_transient,
)
from extractor.foreign_keys import ForeignKeyCatalog
from extractor.positions import StartPoint, find_start
from extractor.provision import Provisioner
from extractor.retention import Retention
from extractor.stall import Progress, Watchdog
from extractor.transactions import TransactionAssembler
from extractor.xa import CatchUp, decode_open
from replicator import crashpoints
from replicator.config import ServiceSettings
from replicator.control import ComponentNodes
from replicator.filters import ReplicateFilter, TrackingSchemaFilter, build_chain
from replicator.lifecycle import LockLost, backoff, check_lock, lead_until_stopped
from replicator.source import source_engine
from replicator.state import State, Status
from replicator.status_publisher import StatusPublisher
from replicator.tracking import CommitSeqno, CommitSeqnoTable
from replicator.zk import Leadership, ServiceNodes, ZkHealth, ZkPosition, connect
from replicator.zk_session_slot import claim_slot
from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
from thl_topics.client import check_access, new_admin
from thl_topics.errors import ThlError, ThlUnavailable
from thl_topics.event import ThlEvent
from thl_topics.producer import ProducerFenced, ThlProducer
from thl_topics.reader import ThlReader

log = logging.getLogger(__name__)
binlog_fixes.install()
table_map_cache.install()
row_decoder.install()


class _Stopped(Exception):
    """stop() was called while waiting to retry."""


_EVENTS = [MariadbGtidEvent, QueryEvent, XidEvent, XAPrepareEvent, WriteRowsEvent,
           UpdateRowsEvent, DeleteRowsEvent, row_decoder.DecodedRows, HeartbeatLogEvent]
#: Seconds the first metadata request may take before Kafka counts as away (and is retried).
ACCESS_CHECK_S = 15.0
#: MySQL error 1236: the requested binlog file or position is not on the server.
_ER_MASTER_FATAL_READING_BINLOG = 1236
#: MariaDB's ER_SLAVE_SAME_ID: a newer binlog client with this server_id took our place.
_ER_SLAVE_SAME_ID = 4052


class Extractor:
    """One extractor of one service. ``run()`` blocks until ``stop()`` or a fatal error."""

    def __init__(self, service: ServiceSettings, cfg: ExtractorConfig) -> None:
        self.service = service
        self.cfg = cfg
        self._stop = threading.Event()
        self.identity = f"{socket.gethostname()}:{os.getpid()}"
        self.tracking = CommitSeqnoTable(service.tracking_schema)
        self.last_committed: ThlEvent | None = None
        self.epoch: int | None = None
        #: Set once the binlog start position is fixed: later source commits are extracted.
        self.streaming = threading.Event()
        self.status = Status(serviceName=service.service, role="extractor",
                             host=socket.gethostname())
        #: The status in ZooKeeper (written once ``run()`` has a session), as every
        #: consumer group publishes its own.
        self.publisher = StatusPublisher("extractor", self.status, log)
        #: Fresh starts after transient failures (source or Kafka down).
        self.retries = 0
        #: Times this instance lost the leader lock while leading.
        self.leadership_losses = 0
        self._lead_lock: Leadership | None = None
        #: ZooKeeper connection of the running extractor (for status and metrics).
        self.zk_health: ZkHealth | None = None
        #: THL retention of the current lead (replaced on every lead).
        self.retention: Retention | None = None
        #: Provisioning of the current lead (replaced on every lead).
        self.provisioner: Provisioner | None = None
        #: Consistency checks of the current lead.
        self.checker: Checker | None = None
        #: The transaction assembler of the current lead (prepared XA transactions).
        self.assembler: TransactionAssembler | None = None
        #: What the stream loop last did, for the stall watchdog and the metrics.
        self.progress = Progress(last_event_at=time.monotonic())

    def stop(self) -> None:
        """Ask the extractor to stop at the next transaction boundary."""
        self._stop.set()

    def run(self) -> None:
        """Lead (or wait as standby), then extract until stopped.

        Losing the leader lock (the ZooKeeper session expired, or a standby took over and
        fenced this one) sends the instance back to standby: it waits for the lock again
        and then starts over from the THL tail, like any new leader.
        """
        slot = claim_slot(self.service.zookeeper, self.service.service, "extractor")
        zk = self._connect_zookeeper()
        if zk is None:
            if slot is not None:
                slot.release()
            return
        if slot is not None:
            slot.follow(zk)
        self.zk_health = ZkHealth(zk)
        nodes = ServiceNodes(zk, self.service.zookeeper.root, self.service.service)
        self.publisher.attach(ComponentNodes(zk, self.service.zookeeper.root,
                                             self.service.service, "extractor"),
                              self.zk_health)
        self._lead_lock = lead = nodes.leadership("extractor", self.identity)
        try:
            lead_until_stopped(lead, self._stop.is_set, functools.partial(self._acquire, lead),
                               functools.partial(self._lead_once, nodes, lead), self._lost)
        finally:
            self.zk_health.closing()
            zk.stop()
            zk.close()
            if slot is not None:
                slot.release()

    def _lost(self, exc: LockLost) -> None:
        self.leadership_losses += 1
        # No status from here: the status node belongs to the new leader.
        log.warning("extractor %s: %s; waiting to lead again", self.identity, exc)

    def _connect_zookeeper(self) -> KazooClient | None:
        """A ZooKeeper session, waited for as long as it takes (None: stopped meanwhile)."""
        zk = self.service.zookeeper
        while True:
            try:
                return connect(zk.hosts, zk.timeout_s)
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("extractor: ZooKeeper at %s: %s; trying again", zk.hosts, exc)
            if self._stop.wait(1.0):
                return None

    def _acquire(self, lead: Leadership) -> bool:
        """Wait as standby until the lock is ours (False: stopped while waiting)."""
        log.info("extractor %s: waiting for the leader lock of service %s",
                 self.identity, self.service.service)
        while not self._stop.is_set():
            try:
                held = lead.acquire(timeout=1.0)
            except KazooException as exc:
                # ZooKeeper away: nobody can take the lock meanwhile; wait for it.
                log.warning("extractor: ZooKeeper: taking the leader lock: %s", exc)
                self._stop.wait(1.0)
                continue
            if held:
                log.info("extractor %s: leader of service %s", self.identity,
                         self.service.service)
                return True
        return False

    def _lead_once(self, nodes: ServiceNodes, lead: Leadership) -> None:
        """One leadership, until stopped; raises LeaderLost when the lock is gone."""
        self.publisher.mark_alive(self.identity)
        self.publisher.set_state(State.SYNCHRONIZING)
        try:
            self._lead_retrying(nodes)
        except _Stopped:
            pass
        except ProducerFenced as exc:
            if not lead.still_held():
                raise LeaderLost(f"fenced by the new leader ({exc})") from exc
            self._fail(exc)
            raise
        except LeaderLost:
            raise
        except Exception as exc:
            self._fail(exc)
            raise
        self.publisher.set_state(State.OFFLINE)

    def _fail(self, exc: Exception) -> None:
        self.publisher.failed("Extractor failed", type(exc).__name__,
                              self.status.appliedLastSeqno + 1, str(exc))

    def _check_leader(self) -> None:
        """Called on transaction boundaries: stop leading once the lock has gone."""
        if self._lead_lock is not None:
            check_lock(self._lead_lock, LeaderLost, "the leader lock")

    def _lead_retrying(self, nodes: ServiceNodes) -> None:
        """Lead; after a transient failure, start over from the THL tail, with backoff.

        Starting over is the restart path the crash tests prove: a new producer fences the
        old one and the THL tail says where the binlog resumes, so nothing repeats or is lost.
        """
        retrying = backoff(self.cfg.retry_limit_s, is_transient, self._sleep, self._log_retry)
        retrying(self._lead, nodes)

    def _sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise _Stopped
        self._check_leader()

    def _log_retry(self, exc: BaseException | None, attempt: int) -> None:
        self.retries += 1
        log.warning("extractor: %s; starting again from the THL tail (attempt %d)",
                    exc, attempt)
        self.publisher.retrying(exc)

    def _lead(self, nodes: ServiceNodes) -> None:
        cfg = self.service
        # One quick metadata request first: a broker that refuses the credentials or the
        # certificate stops the extractor now (KafkaAccessError is terminal), instead of
        # every later request timing out as if Kafka were down and being retried forever.
        check_access(cfg.kafka.client(), ACCESS_CHECK_S)
        admin, _ = new_admin(cfg.kafka.client())
        ensure_thl_topic(admin, ThlTopicSpec(cfg.thl_topic, cfg.kafka.replication_factor,
                                             cfg.kafka.max_message_bytes))
        engine = source_engine(cfg.source)
        try:
            with engine.begin() as conn:
                self.tracking.create(conn)
            # Fence first, then read the tail: once init_transactions returned, no older
            # extractor can commit behind our back, so the tail we read is final.
            producer = ThlProducer(
                cfg.kafka.client(), cfg.thl_topic,
                transactional_id=f"tungsten-extractor-{cfg.service}",
                max_message_bytes=cfg.kafka.max_message_bytes,
                timeout=cfg.kafka.transaction_timeout_s,
                # Each start begins an epoch; its records carry their own run id, so a
                # consumer tells a recreated topic from an extractor restart.
                run_id=uuid.uuid4().hex)
            try:
                with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
                    start = find_start(reader, engine, self.tracking, nodes)
                    self.provisioner = Provisioner(cfg, self.cfg, nodes.client,
                                                   self._filters(), self._source_connection)
                    # Nothing extracted yet (a new service, or one that went ONLINE and
                    # stopped before its first event): provisioning starts as for a new one.
                    self.provisioner.resume(reader, start.next_seqno,
                                            start.origin in ("new", "first position"))
                    self.checker = Checker(cfg, nodes.client, self._filters(),
                                           self._source_connection)
                self._stream(start, producer, engine, nodes)
            finally:
                try:
                    producer.abort()
                    producer.close()
                except ThlError as exc:
                    # Kafka is down: the transaction times out by itself, and the next
                    # producer's init_transactions aborts it anyway.
                    log.warning("extractor: cannot abort the open THL transaction: %s", exc)
        finally:
            engine.dispose()

    def _source_connection(self) -> pymysql.connections.Connection[Any]:
        src = self.service.source
        return pymysql.connect(host=src.host, port=src.port, user=src.user,
                               password=src.password.get_secret_value(), charset="utf8mb4")

    def _filters(self) -> TrackingSchemaFilter:
        f = self.cfg.filters
        # Our own position writes land in the source binlog: never extract them.
        return TrackingSchemaFilter(ReplicateFilter(f.replicate, f.ignore),
                                    self.service.tracking_schema)

    def _binlog(self, position: BinlogPosition) -> BinLogStreamReader:
        src = self.service.source
        self._resume_at = position
        return BinLogStreamReader(
            connection_settings={"host": src.host, "port": src.port, "user": src.user,
                                 "passwd": src.password.get_secret_value()},
            server_id=self.cfg.server_id, log_file=position.file,
            log_pos=position.pos, resume_stream=True, blocking=True, slave_heartbeat=0.2,
            only_events=_EVENTS,
            # File/offset resume is reliable with is_mariadb=False, also against MariaDB.
            is_mariadb=False,
            # Its start-up log lists every parameter; ours says what matters, secrets aside.
            enable_logging=False,
            pymysql_wrapper=BinlogConnection,
        )

    def _initial_position(self) -> BinlogPosition:
        src = self.service.source
        conn = pymysql.connect(host=src.host, port=src.port, user=src.user,
                               password=src.password.get_secret_value())
        try:
            with conn.cursor() as cur:
                if self.cfg.start_at == "earliest":
                    cur.execute("SHOW BINARY LOGS")
                else:
                    cur.execute("SHOW MASTER STATUS")
                row = cur.fetchone()
                if row is None:
                    raise ExtractorError("the source has no binary log: start it with log-bin, "
                                         "binlog-format=ROW, binlog-row-image=FULL")
                if self.cfg.start_at == "earliest":
                    return BinlogPosition(row[0], 4)
                return BinlogPosition(row[0], int(row[1]))
        finally:
            conn.close()

    def _events(self, stream: BinLogStreamReader) -> Iterator[tuple[Any, BinlogPosition]]:
        try:
            for event in stream:
                yield event, BinlogPosition(stream.log_file, stream.log_pos)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code == _ER_SLAVE_SAME_ID:
                raise SameServerId(
                    f"another binlog client with server_id {self.cfg.server_id} connected "
                    "to the source, which dropped this extractor's connection: another "
                    "extractor or replica of this source announces the same server_id; "
                    "give each its own (extractor.server_id) "
                    f"({exc.args[1] if len(exc.args) > 1 else exc})") from exc
            if code == _ER_MASTER_FATAL_READING_BINLOG:
                at = self._resume_at
                raise BinlogPurgedError(
                    f"cannot read the binlog at {at.file} position {at.pos}: "
                    f"{exc.args[1] if len(exc.args) > 1 else exc}. The file was purged or "
                    "the position is wrong; re-provision the targets and reset the service "
                    "to start from the current binlog position.") from exc
            raise

    def _resume_point(self, start: StartPoint, engine: sa.Engine, nodes: ServiceNodes
                      ) -> tuple[BinlogPosition, CatchUp | None]:
        """Where the binlog resumes, and the catch-up over the prepares of XA transactions
        still open at the THL tail (None: none open)."""
        resume = start.position or self._initial_position()
        log.info("extractor: resuming at %s, next seqno %d (from %s)",
                 resume.event_id(), start.next_seqno, start.origin)
        if start.origin == "new":
            self._record_first_position(resume, engine, nodes)
        catch_up = CatchUp(resume, start.xa_open) if start.xa_open else None
        if catch_up is not None:
            log.info("extractor: %d XA transaction(s) were prepared and undecided at the THL "
                     "tail; reading their prepares again from %s", len(start.xa_open),
                     catch_up.start.event_id())
        return resume, catch_up

    def _new_assembler(self, start: StartPoint, epoch: int, emit: Callable[[ThlEvent], None],
                       resume: BinlogPosition, catch_up: CatchUp | None
                       ) -> TransactionAssembler:
        """This lead's transaction assembler, publishing through ``emit``."""
        xcfg = self.cfg
        self.assembler = TransactionAssembler(
            emit=emit, next_seqno=start.next_seqno, epoch=epoch,
            service=self.service.service, source_id=xcfg.source_id,
            filters=self._filters(), fragment_rows=xcfg.fragment_rows,
            fragment_bytes=xcfg.fragment_bytes,
            chain=build_chain(xcfg.filters.chain).around(self.service.tracking_schema),
            start=catch_up.start if catch_up else resume, catch_up=catch_up,
            foreign_keys=ForeignKeyCatalog(self._source_connection))
        return self.assembler

    def _go_online(self, start: StartPoint, epoch: int) -> None:
        """The start position is fixed: later source commits are extracted."""
        self.streaming.set()
        if self.last_committed is None and start.next_seqno > 0:
            self.status.appliedLastSeqno = start.next_seqno - 1
        self.status.appliedLastEpoch = epoch
        self.status.clear_error()
        self.publisher.set_state(State.ONLINE)

    def _stream(self, start: StartPoint, producer: ThlProducer, engine: sa.Engine,
                nodes: ServiceNodes) -> None:
        xcfg = self.cfg
        self.retention = Retention(self.service, xcfg, nodes)
        epoch = self.epoch = start.next_seqno
        resume, catch_up = self._resume_point(start, engine, nodes)
        pending: list[ThlEvent] = []
        batch_started = 0.0

        def emit(event: ThlEvent) -> None:
            nonlocal batch_started
            if not producer.in_transaction:
                batch_started = time.monotonic()
            producer.publish(event)
            if not event.last_frag:
                crashpoints.reached("extract-between-fragments")
            if event.last_frag:
                # Keep the position, not the rows: a batch may be a million rows.
                pending.append(dataclasses.replace(event, data=[]))
                if self.progress.pending_since is None:
                    self.progress.pending_since = time.monotonic()
                self.progress.pending = len(pending)

        assembler = self._new_assembler(start, epoch, emit, resume, catch_up)
        stream = self._binlog(catch_up.start if catch_up else resume)
        self._go_online(start, epoch)
        # A provisioning request's opening event goes before the first streamed change.
        if catch_up is None:
            self._provision(resume, assembler)
        progress = self.progress = Progress(last_event_at=time.monotonic(), read_at=resume)
        watchdog = Watchdog(progress, xcfg.stall_warning_s, self._report_stall)
        watchdog.start()
        try:
            for event, position in self._events(stream):
                progress.last_event_at, progress.read_at = time.monotonic(), position
                assembler.feed(event, position)
                if assembler.in_transaction:
                    continue
                self._show_xa(assembler)
                if self.publisher.stale:  # idle (heartbeats only): show the last commit
                    self.publisher.set_state(State.ONLINE, force=False)
                self._check_leader()
                if not assembler.catching_up:
                    self._provision(position, assembler)
                if pending and (len(pending) >= xcfg.batch_transactions
                                or isinstance(event, HeartbeatLogEvent)
                                or time.monotonic() - batch_started >= xcfg.batch_ms / 1000):
                    self._commit(producer, pending, engine, nodes, assembler)
                if not pending:
                    self.retention.maybe_purge()
                if self._stop.is_set():
                    break
            self._commit(producer, pending, engine, nodes, assembler)
        finally:
            watchdog.stop()
            stream.close()

    def _report_stall(self, text: str) -> None:
        """The watchdog's finding, in the status now (``trepctl status``: ``stall``)."""
        self.status.stall = text
        self.publisher.set_state(State(self.status.state))

    def _record_first_position(self, position: BinlogPosition, engine: sa.Engine,
                               nodes: ServiceNodes) -> None:
        """A new service: make its start position durable before it goes ONLINE (seqno -1:
        nothing extracted yet), so that a restart before the first event resumes here, not
        at the binlog's end of that moment, and loses nothing written in between."""
        pos = CommitSeqno(seqno=-1, epoch=0, eventid=position.event_id(),
                          source_id=self.cfg.source_id)
        with engine.begin() as conn:
            self.tracking.write(conn, pos)
        try:
            nodes.write_position("extractor", ZkPosition(-1, 0, position.event_id()))
        except KazooException as exc:  # the source's table is the position of record
            log.warning("extractor: cannot mirror the first position in ZooKeeper: %s", exc)

    def _show_xa(self, assembler: TransactionAssembler) -> None:
        """The prepared XA transactions in the status (NONE or how many, the oldest, how
        long): one left prepared holds back nothing, but the operator should see it."""
        text = assembler.open_xa()
        if text != self.status.xaPrepared:
            self.status.xaPrepared = text
            self.publisher.stale = True
        elif text != "NONE" and time.monotonic() - self.publisher.last_publish >= 5:
            self.status.xaPrepared = text  # its age
            self.publisher.stale = True

    def _provision(self, position: BinlogPosition, assembler: TransactionAssembler) -> None:
        """Between transactions: take up provisioning and check requests, emit their due
        chunks and ranges."""
        if self.checker is not None:
            self.checker.poll(assembler.next_seqno)
            self.checker.step(position, assembler)
        prov = self.provisioner
        if prov is None:
            return
        prov.poll(assembler.next_seqno)
        prov.step(position, assembler)
        assembler.provisioning = prov.provisioning()
        self.status.provisioning = prov.status_text()

    def _commit(self, producer: ThlProducer, pending: list[ThlEvent], engine: sa.Engine,
                nodes: ServiceNodes, assembler: TransactionAssembler) -> None:
        """Commit the Kafka transaction, then move the positions past it."""
        if not pending:
            return
        # A leader without its lock commits nothing more: the new one may already have
        # read the THL tail (it would fence this commit anyway).
        self._check_leader()
        try:
            producer.commit()
        except ThlUnavailable as exc:
            raise ThlCommitUnknown(f"THL commit failed with an unknown outcome: {exc}; "
                                   "resuming from the THL tail with a new producer") from exc
        crashpoints.reached("extract-committed")
        last = pending[-1]
        pending.clear()
        self.progress.pending_since, self.progress.pending = None, 0
        self.last_committed = last
        pos = CommitSeqno(seqno=last.seqno, epoch=last.epoch, eventid=last.event_id,
                          source_id=last.source_id, shard_id=last.shard_id)
        with engine.begin() as conn:
            self.tracking.write(conn, pos)
        # The XA transactions open at that event (the assembler may have read more since).
        xa_open = {xid: p.event_id() for xid, p in decode_open(last.metadata).items()}
        nodes.mirror_position("extractor", ZkPosition(last.seqno, last.epoch, last.event_id,
                                                      xa_open=xa_open))
        if xa_open and not xa_open.keys().isdisjoint(p.xid for p in assembler.held_xa()):
            # A restart from here reads the open prepares again: the XA crash tests die here,
            # at one that holds replicated changes (an XA of another schema on the same
            # source is tracked too, but holds nothing back).
            crashpoints.reached("extract-xa-open")
        st = self.status
        st.appliedLastSeqno, st.appliedLastEventId = last.seqno, last.event_id
        st.appliedLastEpoch = last.epoch
        st.appliedLatency = round(max(0.0, time.time() - last.tstamp / 1e6), 3)
        self.publisher.set_state(State.ONLINE, force=False)  # throttled; caught up when idle

