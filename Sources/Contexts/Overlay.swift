// A context's staged writes: a persistent ordered map from key to value or tombstone
// (PersistentSortedMap.swift), so a child captures its parent's overlay in O(1).
//
// Invariants:
//  Overlay.O1. Every write gets a stamp no other write of the process has had; an overlay entry
//      keeps the stamp of the write that made it, also when a child's entry is merged
//      into its parent. So "did the parent change this key after the fork" is "does the
//      parent's entry now carry a different stamp than at the fork".
// Thread-safety: overlays are immutable values; stamps come from an atomic counter.
import StrataEngine
import Synchronization

/// A staged write: a value, or a tombstone (nil), and its stamp (Overlay.O1).
struct OverlayEntry: Sendable {
    var value: [UInt8]?
    var stamp: UInt64
    /// False for a write whose value does not depend on what was read (an index
    /// manifest): merges, refreshes and the commit's conflict check leave it out.
    var isChecked: Bool
    /// Whether the root's batch tells an insert from an update for this key
    /// (`Context.stage`): records' keys, for the typed change feed.
    var tracksInsert: Bool
    /// Whether the root commit writes its version into the key
    /// (`WALBatch.versionStampedOperations`): an outbox event's key.
    var stampsVersion: Bool
    /// Whether the snapshot beneath every overlay holds the key, when the write that made
    /// this entry had read that (`Context.getNotingSnapshot`), else nil: the root's batch
    /// then need not look the key up again to tell an insert from an update
    /// (Context.C6).
    var snapshotHolds: Bool?

    private static let nextStamp = Atomic<UInt64>(1)

    /// A write with a fresh stamp.
    init(value: [UInt8]?, isChecked: Bool = true, tracksInsert: Bool = false, stampsVersion: Bool = false,
         snapshotHolds: Bool? = nil) {
        self.value = value
        self.stamp = Self.nextStamp.wrappingAdd(1, ordering: .relaxed).oldValue
        self.isChecked = isChecked
        self.tracksInsert = tracksInsert
        self.stampsVersion = stampsVersion
        self.snapshotHolds = snapshotHolds
    }
}

typealias Overlay = PersistentSortedMap<OverlayEntry>

/// What a context reads beneath its own overlay: its ancestors' overlays as of the fork,
/// nearest first, as an immutable list shared by every context forked from the same point.
final class OverlayLayer: Sendable {
    let overlay: Overlay
    let next: OverlayLayer?

    init(overlay: Overlay, next: OverlayLayer?) {
        self.overlay = overlay
        self.next = next
    }
}

extension Overlay {
    /// The keys in `ranges` whose entries differ between this overlay and `earlier`:
    /// written after `earlier` was captured (Overlay.O1). O(r log n + k); O(1) when nothing changed.
    func keysChanged(since earlier: Overlay, in ranges: [KeyRange]) -> [[UInt8]] {
        guard !isIdentical(to: earlier), !ranges.isEmpty else { return [] }
        var changed = Set<[UInt8]>()
        for range in ranges {
            var iterator = entries(from: range.lower)
            while let (key, entry) = iterator.next(), range.upper.map({ compareKeys(key, $0) < 0 }) ?? true {
                if earlier[key]?.stamp != entry.stamp { changed.insert(key) }
            }
        }
        return changed.sorted { compareKeys($0, $1) < 0 }
    }

    /// The keys whose entries differ between this overlay and `earlier`, among `keys`:
    /// written after `earlier` was captured (Overlay.O1). O(k log n); O(1) when nothing changed.
    func keysChanged(since earlier: Overlay, among keys: Overlay) -> [[UInt8]] {
        guard !isIdentical(to: earlier) else { return [] }
        var changed: [[UInt8]] = []
        var iterator = keys.entries()
        while let (key, entry) = iterator.next() {
            if entry.isChecked && self[key]?.stamp != earlier[key]?.stamp { changed.append(key) }
        }
        return changed
    }
}
