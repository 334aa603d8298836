"""One flavor's owed pods resolved on its snapshot, kept from one decision to the next.

The ledger's witness (``_invariant.place_owed``: planned nodes first, then first fit over the
domain) is a pure function of the snapshot's free capacity and the owed pods. Built from scratch
it costs every owed reservation on every decision, which a backlog of a thousand admitted
Workloads turns into the controller's whole budget. The book keeps what does not change between
decisions (each reservation's domain, planned nodes as indices, pod shape, and the sum of planned
usage per node) and recomputes only what does:

- on a node where the planned pods of every reservation fit the free capacity, each takes all of
  its planned pods, as the greedy does; only over-booked nodes (the scheduler bound pods where
  others were planned) replay the greedy, among the reservations planned there, in ledger order;
- pods left over (planned nodes taken, or never planned) go first fit over their domain, smaller
  domains first, exactly as ``place_owed`` orders them.

So the witness is the one ``place_owed`` builds, at a cost that follows the changes, not the
backlog (a property test compares the two on random histories). A reservation planned beyond
what it owes (a planned total above the admitted count) falls back to ``place_owed`` itself.

Why this module is longer than the others: the book's state (entries, per-node planned sums,
the over-booked set) and the three steps that keep it in step with the snapshot (sync, claim,
witness) must change together; split, each half would reach into the other's arrays.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from admission.controller._invariant import ClaimSet, Demand, place_owed, whole_pods
from topology import Snapshot

__all__ = ["Book", "Entry", "Witness"]

IntArray = npt.NDArray[np.int64]
Key = tuple[str, str]
"""(Workload uid, PodSet)."""


@dataclass(slots=True)
class Entry:
    """One reservation's owed pods resolved on the book's snapshot structure."""

    key: Key
    order: tuple[str, str, str]
    """Ledger order: (workload, PodSet, uid)."""
    row: object
    """The ledger's reservation (kept opaque here)."""
    owed: int
    demand: Demand
    gpu: int
    exact: bool
    planned_pods: int

    @property
    def uid(self) -> str:
        return self.key[0]


Resolve = Callable[[Key, Snapshot], Entry | None]
"""Builds a reservation's entry on a snapshot (None: it owes nothing)."""


@dataclass(frozen=True, slots=True)
class _BookView:
    """What the book's witness keeps to answer ``rows``, ``placed`` … when asked."""

    entries: Callable[[], Sequence[Entry]]
    """The witness's entries in ledger order (listed only when a list is read)."""
    by_key: dict[Key, Entry]
    takes: dict[Key, dict[int, int]]
    """Per entry replayed on an over-booked node: planned node → pods taken."""
    extra: dict[Key, list[tuple[int, int]]]
    """Per entry: (node, pods) placed beyond its planned nodes."""
    short: dict[Key, int]
    """Per entry: pods with no room."""


class Witness:
    """One flavor's owed pods placed on a snapshot: ``rows`` (reservation, pods owed) in ledger
    order, their ``demands``, where each is counted (``placed``), the pods that found no room
    (``missing``) and the resources the witness uses per node (``used``). Built from lists, or
    from the book, whose lists are made when first read: a decision needs only ``used`` and the
    short rows."""

    def __init__(self, rows: list[tuple[object, int]] | None, demands: list[Demand] | None, placed: list[list[tuple[int, int]]] | None,
                 missing: list[int] | None, used: IntArray | None, *, view: _BookView | None = None,
                 sparse: tuple[IntArray, IntArray, int] | None = None) -> None:
        self._rows, self._demands, self._placed, self._missing = rows, demands, placed, missing
        self._used = used
        self._sparse = sparse
        self._view = view
        self._listed: Sequence[Entry] | None = None

    @property
    def used(self) -> IntArray:
        """Resources the witness uses, per node of the snapshot."""
        if self._used is None:
            assert self._sparse is not None
            nodes, rows, n = self._sparse
            self._used = np.zeros((n, 4), dtype=np.int64)
            self._used[nodes] = rows
        return self._used

    def used_rows(self) -> tuple[IntArray, IntArray]:
        """(nodes, their rows of ``used``), the nodes distinct: all the witness uses, for a fabric
        where owed pods touch few nodes."""
        if self._sparse is not None:
            return self._sparse[0], self._sparse[1]
        used = self.used
        nodes = np.flatnonzero(used.any(axis=1))
        return nodes, used[nodes]

    def _entries(self) -> Sequence[Entry]:
        assert self._view is not None
        if self._listed is None:
            self._listed = self._view.entries()
        return self._listed

    @property
    def rows(self) -> list[tuple[object, int]]:
        if self._rows is None:
            self._rows = [(e.row, e.owed) for e in self._entries()]
        return self._rows

    @property
    def demands(self) -> list[Demand]:
        if self._demands is None:
            self._demands = [e.demand for e in self._entries()]
        return self._demands

    @property
    def missing(self) -> list[int]:
        if self._missing is None:
            assert self._view is not None
            self._missing = [self._view.short.get(e.key, 0) for e in self._entries()]
        return self._missing

    @property
    def placed(self) -> list[list[tuple[int, int]]]:
        if self._placed is None:
            v = self._view
            assert v is not None
            out = []
            for e in self._entries():
                takes = v.takes.get(e.key)
                mine = list(e.demand.planned) if takes is None else [(n, takes[n]) for n, _ in e.demand.planned if takes.get(n, 0) > 0]
                out.append(mine + v.extra.get(e.key, []))
            self._placed = out
        return self._placed

    def short(self) -> list[tuple[object, int, Demand, int]]:
        """(reservation, owed, demand, pods with no room) for the rows that came up short, in ledger order."""
        v = self._view
        if v is not None:
            if not v.short:
                return []
            found = sorted((v.by_key[k] for k in v.short), key=lambda e: e.order)
            return [(e.row, e.owed, e.demand, v.short[e.key]) for e in found]
        return [(r, owed, d, m) for (r, owed), d, m in zip(self.rows, self.demands, self.missing) if m > 0]


class Book:
    """Owed pods of one flavor, resolved on one snapshot structure and kept up to date."""

    def __init__(self, resolve: Resolve) -> None:
        self._resolve = resolve
        self._stamp: object = None
        self._entries: dict[Key, Entry] = {}
        self._uids: dict[str, set[Key]] = {}
        self._order: list[tuple[tuple[str, str, str], Key]] = []
        self._pending: set[Key] = set()
        self._use: IntArray = np.zeros((0, 4), dtype=np.int64)
        self._on_node: dict[int, set[Key]] = {}
        self._over_owed: set[Key] = set()
        self._floating: set[Key] = set()
        self._claims: tuple[object, ClaimSet] | None = None
        self.version = 0
        self._planned: IntArray = np.zeros(0, dtype=np.int64)
        self._planned_at = -1
        self._kept: tuple[int, set[Key], IntArray, bytes, Witness] | None = None
        """The last witness with nothing short: (version, skipped keys, planned nodes, their free rows, witness)."""
        self._nothing: tuple[int, Witness] | None = None
        """The witness when nothing is owed, per fabric size."""
        # Claims (owed pods with GPUs on their domains) in slots updated in place; a free slot is
        # inert everywhere (no pods, the empty domain in mask row 0).
        self._slot: dict[Key, int] = {}
        self._free_slots: list[int] = []
        self._who: list[tuple[str, str]] = []
        self._c = np.zeros((4, 0), dtype=np.int64)  # pods, gpu, node, dom per slot
        self._mask_rows: dict[bytes, int] = {}
        self._masks: list[npt.NDArray[np.bool_]] = []
        self._mask_users: list[int] = []
        self._free_rows: list[int] = []
        self._stacked: npt.NDArray[np.bool_] | None = None
        self._stacked_sizes: IntArray = np.zeros(0, dtype=np.int64)

    def touch(self, keys: Iterable[Key]) -> None:
        """These reservations changed (owed, planned, or gone): resolve them again on next use."""
        self._pending.update(keys)

    def gone(self, keys: Iterable[Key]) -> None:
        """These reservations ended (their Workload forgotten): dropped now, not at the next
        ``sync``, which a standby never reaches (it decides nothing), so their entries do not pile up."""
        dropped = False
        for key in keys:
            self._pending.discard(key)
            if key in self._entries or key in self._slot:
                self._drop(key)
                dropped = True
        if dropped:
            self._changed()

    def sync(self, snapshot: Snapshot) -> None:
        stamp = _stamp(snapshot)
        if stamp != self._stamp:
            keys = set(self._entries) | self._pending
            self._entries.clear()
            self._uids.clear()
            self._order.clear()
            self._on_node.clear()
            self._over_owed.clear()
            self._floating.clear()
            self._use = np.zeros((snapshot.num_nodes, 4), dtype=np.int64)
            self._stamp = stamp
            self._pending = keys
            self._changed()
            self._slot.clear()
            self._free_slots.clear()
            self._who.clear()
            self._c = np.zeros((4, 0), dtype=np.int64)
            empty = np.zeros(snapshot.num_nodes, dtype=bool)
            self._mask_rows = {empty.tobytes(): 0}
            self._masks = [empty]
            self._mask_users = [1]  # row 0, the empty domain, is never released
            self._free_rows = []
            self._stacked = None
        if not self._pending:
            return
        for key in sorted(self._pending):
            self._drop(key)
            entry = self._resolve(key, snapshot)
            if entry is not None and entry.owed > 0:
                self._add(entry)
                self._claim(entry, snapshot.num_nodes)
        self._pending.clear()
        self._changed()

    def _changed(self) -> None:
        """The entries changed: a new version, whose claims are summed afresh; the last witness
        (``_kept``) is of an older version, never read again, and may name Workloads now gone."""
        self._claims = None
        self.version += 1
        self._kept = None

    def _add(self, e: Entry) -> None:
        self._entries[e.key] = e
        self._uids.setdefault(e.uid, set()).add(e.key)
        bisect.insort(self._order, (e.order, e.key))
        for n, k in e.demand.planned:
            self._use[n] += e.demand.shape * k
            self._on_node.setdefault(n, set()).add(e.key)
        if e.planned_pods > e.owed:
            self._over_owed.add(e.key)
        elif e.planned_pods < e.owed:
            self._floating.add(e.key)

    def _claim(self, e: Entry, num_nodes: int) -> None:
        if e.gpu <= 0:
            return
        nodes = np.fromiter((n for n, _ in e.demand.planned), dtype=np.int64) if e.exact and e.demand.planned else e.demand.domain
        node, dom = -1, 0
        if nodes.size == 1:
            node = int(nodes[0])
        else:
            mask = np.zeros(num_nodes, dtype=bool)
            mask[nodes] = True
            k = mask.tobytes()
            dom = self._mask_rows.get(k, -1)
            if dom < 0:  # a domain no live claim uses yet: a released row, else a new one
                if self._free_rows:
                    dom = self._free_rows.pop()
                    self._masks[dom] = mask
                    self._mask_users[dom] = 0
                else:
                    dom = len(self._masks)
                    self._masks.append(mask)
                    self._mask_users.append(0)
                self._mask_rows[k] = dom
                self._stacked = None
            self._mask_users[dom] += 1
        if self._free_slots:
            i = self._free_slots.pop()
            self._who[i] = (e.order[0], e.order[1])
        else:
            i = len(self._who)
            self._who.append((e.order[0], e.order[1]))
            if i >= self._c.shape[1]:
                grown = np.zeros((4, max(16, 2 * self._c.shape[1])), dtype=np.int64)
                grown[:, :self._c.shape[1]] = self._c
                self._c = grown
        self._c[:, i] = (e.owed, e.gpu, node, dom)
        self._slot[e.key] = i

    def _drop(self, key: Key) -> None:
        i = self._slot.pop(key, None)
        if i is not None:
            dom = int(self._c[3, i])
            if dom > 0:
                self._mask_users[dom] -= 1
                if self._mask_users[dom] == 0:  # no live claim on this domain: its row goes back, empty
                    del self._mask_rows[self._masks[dom].tobytes()]
                    self._masks[dom] = self._masks[0]
                    self._free_rows.append(dom)
                    self._stacked = None
            self._c[:, i] = (0, 0, -1, 0)
            self._who[i] = ("", "")  # an inert slot names nobody: a Workload gone leaves no trace
            self._free_slots.append(i)
        e = self._entries.pop(key, None)
        if e is None:
            return
        keys = self._uids[e.uid]
        keys.discard(key)
        if not keys:
            del self._uids[e.uid]
        i = bisect.bisect_left(self._order, (e.order, e.key))
        del self._order[i]
        for n, k in e.demand.planned:
            self._use[n] -= e.demand.shape * k
            users = self._on_node[n]
            users.discard(key)
            if not users:
                del self._on_node[n]
        self._over_owed.discard(key)
        self._floating.discard(key)

    # ------------------------------------------------------------------ the witness

    def witness(self, snapshot: Snapshot, exclude_uid: str | None = None) -> Witness:
        """``place_owed``'s witness for every owed reservation but ``exclude_uid``'s."""
        self.sync(snapshot)
        if not self._entries:  # nothing owed on the flavor (most decisions): the same empty answer
            if self._nothing is None or self._nothing[0] != snapshot.num_nodes:
                empty = (np.zeros(0, dtype=np.int64), np.zeros((0, 4), dtype=np.int64), snapshot.num_nodes)
                self._nothing = (snapshot.num_nodes, Witness(None, None, None, None, None, view=_BookView(list, {}, {}, {}, {}), sparse=empty))
            return self._nothing[1]
        skip = set(self._uids.get(exclude_uid, ())) if exclude_uid is not None else set()
        kept = self._kept
        if kept is not None and kept[0] == self.version and kept[1] == skip and snapshot.free[kept[2]].tobytes() == kept[3]:
            return kept[4]
        order = list(self._order)

        def entries() -> list[Entry]:
            return [self._entries[k] for _, k in order if k not in skip]

        if self._over_owed - skip:  # planned beyond what is owed: the greedy's own order decides
            return self._reference(snapshot, entries())
        free = snapshot.free
        planned = self._planned_nodes()
        rows = self._use[planned]  # a copy: the planned nodes' usage, the only rows it can have
        for k in skip:
            d = self._entries[k].demand
            for n, q in d.planned:
                rows[int(np.searchsorted(planned, n))] -= d.shape * q
        takes: dict[Key, dict[int, int]] = {}
        short: dict[Key, int] = {}
        over = np.flatnonzero((rows > free[planned]).any(axis=1)) if planned.size else planned
        for pos in over.tolist():  # over-booked: replay the greedy there
            n = int(planned[pos])
            row = free[n].copy()
            for key in sorted((k for k in self._on_node.get(n, ()) if k not in skip), key=lambda k: self._entries[k].order):
                e = self._entries[key]
                want = next(q for m, q in e.demand.planned if m == n)
                need = e.demand.shape > 0
                take = min(want, int((row[need] // e.demand.shape[need]).min()))
                row -= e.demand.shape * take
                takes.setdefault(key, {m: q for m, q in e.demand.planned})[n] = take
                if take < want:
                    short[key] = short.get(key, 0) + want - take
            rows[pos] = free[n] - row
        for key in self._floating - skip:
            e = self._entries[key]
            short[key] = short.get(key, 0) + e.owed - e.planned_pods
        extra: dict[Key, list[tuple[int, int]]] = {}
        view = _BookView(entries, dict(self._entries), takes, extra, {})
        if not short:
            witness = Witness(None, None, None, None, None, view=view, sparse=(planned, rows, snapshot.num_nodes))
            # Nothing short: the answer read free capacity at the planned nodes alone, so it holds
            # until the book changes or those rows do (the invariant check and the next decision
            # ask the same question).
            self._kept = (self.version, skip, planned, free[planned].tobytes(), witness)
            return witness
        used = np.zeros((snapshot.num_nodes, 4), dtype=np.int64)
        used[planned] = rows
        rank = {k: i for i, k in enumerate(sorted(short, key=lambda k: self._entries[k].order))}
        left = free - used
        for key in sorted(short, key=lambda k: (self._entries[k].demand.domain.size, rank[k])):
            d = self._entries[key].demand
            if d.domain.size == 0:
                continue
            caps = whole_pods(left[d.domain], d.shape)
            for pos in np.flatnonzero(caps > 0).tolist():
                node = int(d.domain[pos])
                take = min(int(caps[pos]), short[key])
                left[node] -= d.shape * take
                used[node] += d.shape * take
                extra.setdefault(key, []).append((node, take))
                short[key] -= take
                if short[key] == 0:
                    break
        view.short.update({k: m for k, m in short.items() if m > 0})
        return Witness(None, None, None, None, used, view=view)

    def _planned_nodes(self) -> IntArray:
        """Nodes some owed pods are planned on (the only ones the planned pods can over-book), sorted."""
        if self._planned_at != self.version:
            self._planned = np.array(sorted(self._on_node), dtype=np.int64)
            self._planned_at = self.version
        return self._planned

    @staticmethod
    def _reference(snapshot: Snapshot, entries: Sequence[Entry]) -> Witness:
        demands = [e.demand for e in entries]
        placed, missing, used = place_owed(snapshot.free, demands)
        return Witness([(e.row, e.owed) for e in entries], demands, placed, missing, used)

    # ------------------------------------------------------------------ claims

    def claims(self, snapshot: Snapshot, exclude_uid: str | None = None) -> ClaimSet:
        """Owed pods with GPUs as a ``ClaimSet`` (one-node domains by index, the rest interned);
        free slots are inert claims (no pods, an empty domain)."""
        self.sync(snapshot)
        mine = [self._slot[k] for k in self._uids.get(exclude_uid, ()) if k in self._slot] if exclude_uid is not None else []
        key = exclude_uid if mine else None  # leaving out a Workload that owes nothing leaves out nothing
        cached = self._claims
        if cached is not None and cached[0] == key:
            return cached[1]
        n = len(self._who)
        c = self._c[:, :n].copy()
        if mine:
            c[:, mine] = np.array([[0], [0], [-1], [0]])
        if self._stacked is None:
            self._stacked = np.stack(self._masks)  # row 0, the empty domain, is always there
            self._stacked_sizes = self._stacked.sum(axis=1)
        out = ClaimSet(self._who, c[0], c[1], c[2], c[3], self._stacked, mask_rows=self._mask_rows, sizes=self._stacked_sizes)
        self._claims = (key, out)
        return out


def _stamp(snapshot: Snapshot) -> object:
    """What a resolved entry depends on besides the reservation: node structure and who may use which node."""
    blocked = tuple(sorted((i, t) for i, t in snapshot.taint_blocked.items())) if snapshot.taint_blocked else ()
    token = snapshot.static_cache.setdefault(_TOKEN, object())  # renewed when labels or allocatable change (the cache is cleared)
    return (id(snapshot.node_names), id(token), snapshot.eligible_token, hash(blocked))


_TOKEN = ("owed-book-token",)
