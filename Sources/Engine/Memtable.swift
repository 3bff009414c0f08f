// The memtable: committed changes not yet folded into the B+tree, as a persistent
// (immutable, structurally shared) AVL tree. Publishing a commit makes a new memtable
// that shares all but O(log n) nodes with the old one, so a snapshot keeps the memtable
// as of its version by holding a reference: readers never lock and never block writers.
//
// Invariants:
//  M1. In-order traversal yields strictly increasing keys.
//  M2. Every node's height is 1 + the larger child height, and child heights differ by
//      at most 1.
// Thread-safety: values are immutable and `Sendable`.

/// A change as the memtable keeps it: the value (nil for a delete) and its version.
struct MemtableEntry: Sendable, Equatable {
    var version: UInt64
    var value: [UInt8]?
}

final class MemtableNode: Sendable {
    let key: [UInt8]
    let entry: MemtableEntry
    let left: MemtableNode?
    let right: MemtableNode?
    let height: Int

    init(key: [UInt8], entry: MemtableEntry, left: MemtableNode?, right: MemtableNode?) {
        self.key = key
        self.entry = entry
        self.left = left
        self.right = right
        self.height = 1 + max(left?.height ?? 0, right?.height ?? 0)
    }
}

struct Memtable: Sendable {
    private(set) var root: MemtableNode?
    /// Keys held.
    private(set) var count = 0
    /// Approximate bytes held (keys, values and per-entry overhead), for the checkpoint trigger.
    private(set) var byteCount = 0

    static let entryOverheadBytes = 64

    /// The entry for `key`, if the memtable has one. O(log n).
    func entry(_ key: [UInt8]) -> MemtableEntry? {
        var node = root
        while let current = node {
            let order = compareKeys(key, current.key)
            if order == 0 { return current.entry }
            node = order < 0 ? current.left : current.right
        }
        return nil
    }

    /// A memtable with `entry` under `key` (replacing any earlier one). O(log n) new nodes.
    func inserting(_ key: [UInt8], _ entry: MemtableEntry) -> Memtable {
        var result = self
        var replaced: MemtableEntry?
        result.root = Self.insert(key, entry, into: root, replaced: &replaced)
        let added = key.count + (entry.value?.count ?? 0) + Self.entryOverheadBytes
        if let replaced {
            result.byteCount += added - key.count - (replaced.value?.count ?? 0) - Self.entryOverheadBytes
        } else {
            result.count += 1
            result.byteCount += added
        }
        return result
    }

    /// A memtable holding the given entries, built balanced in O(n) without rotations.
    /// `entries` must be sorted by key with no key twice.
    static func build(sortedUnique entries: [(key: [UInt8], entry: MemtableEntry)]) -> Memtable {
        func subtree(_ low: Int, _ high: Int) -> MemtableNode? {
            guard low < high else { return nil }
            let middle = (low + high) / 2
            return MemtableNode(key: entries[middle].key, entry: entries[middle].entry,
                                left: subtree(low, middle), right: subtree(middle + 1, high))
        }
        var memtable = Memtable()
        memtable.root = subtree(0, entries.count)
        memtable.count = entries.count
        memtable.byteCount = entries.reduce(0) { $0 + $1.key.count + ($1.entry.value?.count ?? 0) + entryOverheadBytes }
        return memtable
    }

    /// Entries in key order from the first key at or above `start` (forward) or at or
    /// below it (reverse); nil starts at the end.
    func entries(from start: [UInt8]?, reverse: Bool) -> MemtableIterator {
        MemtableIterator(root: root, start: start, reverse: reverse)
    }

    private static func insert(_ key: [UInt8], _ entry: MemtableEntry, into node: MemtableNode?,
                               replaced: inout MemtableEntry?) -> MemtableNode {
        guard let node else { return MemtableNode(key: key, entry: entry, left: nil, right: nil) }
        let order = compareKeys(key, node.key)
        if order == 0 {
            replaced = node.entry
            return MemtableNode(key: key, entry: entry, left: node.left, right: node.right)
        }
        if order < 0 {
            return balance(node.key, node.entry, insert(key, entry, into: node.left, replaced: &replaced), node.right)
        }
        return balance(node.key, node.entry, node.left, insert(key, entry, into: node.right, replaced: &replaced))
    }

    private static func balance(_ key: [UInt8], _ entry: MemtableEntry, _ left: MemtableNode?,
                                _ right: MemtableNode?) -> MemtableNode {
        let leftHeight = left?.height ?? 0
        let rightHeight = right?.height ?? 0
        if leftHeight > rightHeight + 1, let left {
            if (left.left?.height ?? 0) >= (left.right?.height ?? 0) {
                return MemtableNode(key: left.key, entry: left.entry, left: left.left,
                                    right: MemtableNode(key: key, entry: entry, left: left.right, right: right))
            }
            let pivot = left.right!
            return MemtableNode(key: pivot.key, entry: pivot.entry,
                                left: MemtableNode(key: left.key, entry: left.entry, left: left.left, right: pivot.left),
                                right: MemtableNode(key: key, entry: entry, left: pivot.right, right: right))
        }
        if rightHeight > leftHeight + 1, let right {
            if (right.right?.height ?? 0) >= (right.left?.height ?? 0) {
                return MemtableNode(key: right.key, entry: right.entry,
                                    left: MemtableNode(key: key, entry: entry, left: left, right: right.left),
                                    right: right.right)
            }
            let pivot = right.left!
            return MemtableNode(key: pivot.key, entry: pivot.entry,
                                left: MemtableNode(key: key, entry: entry, left: left, right: pivot.left),
                                right: MemtableNode(key: right.key, entry: right.entry, left: pivot.right, right: right.right))
        }
        return MemtableNode(key: key, entry: entry, left: left, right: right)
    }

    /// Checks M1 and M2 (tests only: O(n)).
    func checkInvariants() -> Bool {
        var previous: [UInt8]?
        var ordered = true
        func walk(_ node: MemtableNode?) -> Int? {
            guard let node else { return 0 }
            guard let left = walk(node.left) else { return nil }
            if let previous, compareKeys(previous, node.key) >= 0 { ordered = false }
            previous = node.key
            guard let right = walk(node.right) else { return nil }
            guard abs(left - right) <= 1, node.height == 1 + max(left, right) else { return nil }
            return node.height
        }
        return walk(root) != nil && ordered
    }
}

/// An in-order walk of a memtable with an explicit stack (no recursion, O(log n) memory).
struct MemtableIterator: IteratorProtocol {
    private var stack: [MemtableNode] = []
    private let reverse: Bool

    init(root: MemtableNode?, start: [UInt8]?, reverse: Bool) {
        self.reverse = reverse
        var node = root
        while let current = node {
            guard let start else {
                stack.append(current)
                node = reverse ? current.right : current.left
                continue
            }
            let order = compareKeys(current.key, start)
            if reverse {
                if order <= 0 { stack.append(current); node = current.right } else { node = current.left }
            } else {
                if order >= 0 { stack.append(current); node = current.left } else { node = current.right }
            }
        }
    }

    mutating func next() -> (key: [UInt8], entry: MemtableEntry)? {
        guard let node = stack.popLast() else { return nil }
        var child = reverse ? node.left : node.right
        while let current = child {
            stack.append(current)
            child = reverse ? current.right : current.left
        }
        return (node.key, node.entry)
    }
}
