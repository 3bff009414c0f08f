// A context's scan: a merge of its overlay, its ancestors' overlays as of the fork and
// the snapshot, in key order, where the nearest level wins a key and tombstones hide it
// (Context.C1).
import StrataEngine

package struct ContextCursor {
    /// The overlays' iterators, nearest level first; the snapshot comes after them.
    private var overlays: [Overlay.Iterator] = []
    private var snapshot: SnapshotCursor
    /// The current key of each source (overlays, then the snapshot) and its value (nil
    /// for a tombstone).
    private var heads: [(key: [UInt8], value: [UInt8]?)?] = []
    private let range: KeyRange
    private let reverse: Bool

    /// A cursor over what `context` sees of `range`. For an observed query's context it
    /// notes the whole range as read (Context.C5), since it may be stopped anywhere, unless the
    /// caller notes what it walked itself (`notesRange: false`).
    package init(_ context: Context, range: KeyRange, reverse: Bool, notesRange: Bool = true) throws {
        self.range = range
        self.reverse = reverse
        if notesRange { context.readRecorder?.note(lower: range.lower, upper: range.upper) }
        let start = reverse ? range.upper : range.lower
        overlays = context.overlayLevels.filter { !$0.isEmpty }.map { $0.entries(from: start, reverse: reverse) }
        snapshot = try context.snapshot.cursor(range, reverse: reverse)
        heads = Array(repeating: nil, count: self.overlays.count + 1)
        for index in heads.indices { try advance(index) }
    }

    /// The next visible pair in the range, or nil.
    package mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        while true {
            var best: Int?
            for index in heads.indices {
                guard let head = heads[index] else { continue }
                guard let current = best else { best = index; continue }
                let order = compareKeys(head.key, heads[current]!.key)
                if reverse ? order > 0 : order < 0 { best = index }
            }
            guard let best, let winner = heads[best] else { return nil }
            // The nearest level (lowest index) holding this key wins; the others skip it.
            for index in heads.indices where heads[index].map({ compareKeys($0.key, winner.key) == 0 }) == true {
                try advance(index)
            }
            if reverse {
                if let upper = range.upper, compareKeys(winner.key, upper) >= 0 { continue }
                if let lower = range.lower, compareKeys(winner.key, lower) < 0 { return nil }
            } else if let upper = range.upper, compareKeys(winner.key, upper) >= 0 {
                return nil
            }
            if let value = winner.value { return (winner.key, value) }
        }
    }

    private mutating func advance(_ index: Int) throws {
        if index < overlays.count {
            heads[index] = overlays[index].next().map { ($0.key, $0.value.value) }
        } else {
            heads[index] = try snapshot.next().map { ($0.key, $0.value) }
        }
    }
}
