"""The consumer runtime shared by every applier: position, handshake, order, blocks, states.

One runtime drives one consumer group. Its loop:

1. Wait for the group's ZooKeeper lock (another process may apply the group: standby), then
   until the desired state (ZooKeeper, written by ``trepctl``) is ONLINE (``lifecycle``,
   ``control``).
2. GOING-ONLINE:SYNCHRONIZING: connect the target, read its stored position, wait until the
   THL holds that seqno's last fragment and check that it has the stored epoch and event id
   (the epoch handshake, ``handshake``), then seek to the next seqno by a search over offsets
   (``sessions``).
3. ONLINE: stream records in seqno order (``order``). The runtime prepares each fragment for
   the target (``preparation``): the group's filters run, heartbeat rows become
   ``Heartbeat`` records, statements follow the applier's policy, keyless tables are refused
   where the applier cannot address their rows; a check event compares the target's rows
   with the source's (``checks``). Fragments of a seqno go into one block; a block closes at
   the applier's limits (events, rows, bytes, milliseconds; the group may override them) and
   commits with its position (``blocks``). After the commit: ZooKeeper mirror, Kafka offset
   commit, status (``stream``).
4. Transient failures (target, broker or ZooKeeper down) retry with backoff from the stored
   position; data and log failures go to OFFLINE:ERROR at their seqno until an operator acts
   (``lifecycle``, ``sessions``).

With ``channels: N`` (parallel apply) step 3 routes each seqno to a channel by shard
(``shards``, ``dispatch``); the channels apply side by side on their own appliers, each in
the same block loop (``channel_workers``), critical seqnos apply alone, and the group's
position is the lowest channel's. Everything else (states, retries, handshake, mirrors) is
the same for both.

ZooKeeper is the control plane, never the position of record: while it is away the group
goes on applying (the target holds the position), mirrors and statuses are sent again when it
is back, and only the lock matters: a process whose ZooKeeper session expired stops at the
next seqno boundary and waits for the lock again.

The parts of one group that these modules share are built once by ``ConsumerRuntime``
(``group``). Every module logs as ``consumers.runtime``.
"""

from consumers.runtime.lifecycle import ConsumerRuntime, FeedSettings

__all__ = ["ConsumerRuntime", "FeedSettings"]
