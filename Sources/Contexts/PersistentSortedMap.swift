// A persistent (structurally shared) ordered map from byte-string keys to values: an AVL
// tree whose updates copy only the O(log n) nodes on the path they change. Holding a copy
// of the map is therefore a snapshot of it, taken in O(1): the contexts' overlays are built
// on it (a child captures its parent's overlay in O(1)). A node no other map, snapshot or
// iterator holds is updated in place instead (copy on write, node by node): a unit of work
// staging thousands of changes into an overlay nobody shares allocates a node per key, not
// a path of them per change.
//
// It lives beside its one user, the overlays (Overlay.swift), so that it is compiled for
// their entries: in the engine's module, every overlay update and lookup ran its generic
// code unspecialized, looking up metadata at run time at each step (Swift inlines or
// specializes an `@inlinable package` declaration only inside its module). Moved here,
// nested and records-update took 22 % fewer instructions (callgrind, N = 100,000).
//
// Invariants:
//  PersistentSortedMap.M1. In-order traversal yields strictly increasing keys (in `compareKeys` order).
//  PersistentSortedMap.M2. Every node's height is 1 + the larger child height, and child heights differ by
//      at most 1.
//  PersistentSortedMap.M3. A node is changed only while the map being updated holds the only reference to it
//      and to every node above it; below a shared node the path is copied.
// Thread-safety: a node another map or thread can reach is never changed (PersistentSortedMap.M3); a map is a
// value and `Sendable` when its values are.
import StrataEngine

/// An ordered map from keys to `Value` with value semantics: a copy is a snapshot that
/// shares all nodes with the original, and an update copies only the O(log n) nodes on its
/// path that a copy (or an iterator) still holds, changing the others in place.
struct PersistentSortedMap<Value: Sendable>: Sendable {
    final class Node: @unchecked Sendable {
        // @unchecked: the `var`s change only under PersistentSortedMap.M3, when no other reference exists. For
        // the same reason they go without run-time exclusivity checks: an insert holds an
        // access to a child link per level it descends, and those checks cost more than
        // the insert itself (a third of records-update's samples).
        let key: [UInt8]
        @exclusivity(unchecked) var value: Value
        @exclusivity(unchecked) var left: Node?
        @exclusivity(unchecked) var right: Node?
        @exclusivity(unchecked) var height: Int

        init(key: [UInt8], value: Value, left: Node?, right: Node?) {
            self.key = key
            self.value = value
            self.left = left
            self.right = right
            self.height = 1 + max(left?.height ?? 0, right?.height ?? 0)
        }
    }

    var root: Node?
    var storedCount = 0

    /// Keys held.
    var count: Int { storedCount }

    /// An empty map.
    init() {}

    /// Whether the map holds no keys.
    var isEmpty: Bool { root == nil }

    /// The value under `key`, if any. O(log n).
    subscript(key: [UInt8]) -> Value? {
        var node = root
        while let current = node {
            let order = compareKeys(key, current.key)
            if order == 0 { return current.value }
            node = order < 0 ? current.left : current.right
        }
        return nil
    }

    /// Whether both maps are the same version of one map (they share their root), in O(1).
    /// False does not mean their contents differ.
    func isIdentical(to other: PersistentSortedMap) -> Bool { root === other.root }

    /// Stores `value` under `key` (replacing any earlier value) and returns the value it
    /// replaced. O(log n); new nodes only where the path is shared (PersistentSortedMap.M3).
    @discardableResult
    mutating func updateValue(_ value: Value, forKey key: [UInt8]) -> Value? {
        var replaced: Value?
        Self.insert(key, value, inPlace: &root, replaced: &replaced)
        if replaced == nil { storedCount += 1 }
        return replaced
    }

    /// A map holding `entries`, built balanced in O(n) without rotations. `entries` must
    /// be sorted by key with no key twice.
    init(sortedUnique entries: [(key: [UInt8], value: Value)]) {
        func subtree(_ low: Int, _ high: Int) -> Node? {
            guard low < high else { return nil }
            let middle = (low + high) / 2
            return Node(key: entries[middle].key, value: entries[middle].value,
                        left: subtree(low, middle), right: subtree(middle + 1, high))
        }
        root = subtree(0, entries.count)
        storedCount = entries.count
    }

    /// Entries in key order from the first key at or above `start` (forward) or at or
    /// below it (reverse); nil starts at the end. O(log n) to start, O(1) amortized per step.
    func entries(from start: [UInt8]? = nil, reverse: Bool = false) -> Iterator {
        Iterator(root: root, start: start, reverse: reverse)
    }

    /// Inserts into the subtree at `node`, changing the nodes on the path in place while
    /// this reference is their only one (PersistentSortedMap.M3), copying the path from the first shared one.
    static func insert(_ key: [UInt8], _ value: Value, inPlace node: inout Node?, replaced: inout Value?) {
        guard node != nil, isKnownUniquelyReferenced(&node) else {
            node = insert(key, value, into: node, replaced: &replaced)
            return
        }
        let current = node.unsafelyUnwrapped
        let order = compareKeys(key, current.key)
        if order == 0 {
            replaced = current.value
            current.value = value
            return
        }
        if order < 0 {
            insert(key, value, inPlace: &current.left, replaced: &replaced)
        } else {
            insert(key, value, inPlace: &current.right, replaced: &replaced)
        }
        let leftHeight = current.left?.height ?? 0
        let rightHeight = current.right?.height ?? 0
        if abs(leftHeight - rightHeight) > 1 {
            // A rotation (at most one per insert) builds its few nodes anew.
            node = balance(current.key, current.value, current.left, current.right)
        } else {
            current.height = 1 + max(leftHeight, rightHeight)
        }
    }

    static func insert(_ key: [UInt8], _ value: Value, into node: Node?, replaced: inout Value?) -> Node {
        guard let node else { return Node(key: key, value: value, left: nil, right: nil) }
        let order = compareKeys(key, node.key)
        if order == 0 {
            replaced = node.value
            return Node(key: key, value: value, left: node.left, right: node.right)
        }
        if order < 0 {
            return balance(node.key, node.value, insert(key, value, into: node.left, replaced: &replaced), node.right)
        }
        return balance(node.key, node.value, node.left, insert(key, value, into: node.right, replaced: &replaced))
    }

    static func balance(_ key: [UInt8], _ value: Value, _ left: Node?, _ right: Node?) -> Node {
        let leftHeight = left?.height ?? 0
        let rightHeight = right?.height ?? 0
        if leftHeight > rightHeight + 1, let left {
            if (left.left?.height ?? 0) >= (left.right?.height ?? 0) {
                return Node(key: left.key, value: left.value, left: left.left,
                            right: Node(key: key, value: value, left: left.right, right: right))
            }
            let pivot = left.right!
            return Node(key: pivot.key, value: pivot.value,
                        left: Node(key: left.key, value: left.value, left: left.left, right: pivot.left),
                        right: Node(key: key, value: value, left: pivot.right, right: right))
        }
        if rightHeight > leftHeight + 1, let right {
            if (right.right?.height ?? 0) >= (right.left?.height ?? 0) {
                return Node(key: right.key, value: right.value,
                            left: Node(key: key, value: value, left: left, right: right.left),
                            right: right.right)
            }
            let pivot = right.left!
            return Node(key: pivot.key, value: pivot.value,
                        left: Node(key: key, value: value, left: left, right: pivot.left),
                        right: Node(key: right.key, value: right.value, left: pivot.right, right: right.right))
        }
        return Node(key: key, value: value, left: left, right: right)
    }

    /// Checks PersistentSortedMap.M1 and PersistentSortedMap.M2 (tests only: O(n)).
    func checkInvariants() -> Bool {
        var previous: [UInt8]?
        var ordered = true
        var nodes = 0
        func walk(_ node: Node?) -> Int? {
            guard let node else { return 0 }
            nodes += 1
            guard let left = walk(node.left) else { return nil }
            if let previous, compareKeys(previous, node.key) >= 0 { ordered = false }
            previous = node.key
            guard let right = walk(node.right) else { return nil }
            guard abs(left - right) <= 1, node.height == 1 + max(left, right) else { return nil }
            return node.height
        }
        return walk(root) != nil && ordered && nodes == count
    }

    /// An in-order walk with an explicit stack (no recursion, O(log n) memory).
    struct Iterator: IteratorProtocol {
        var stack: [Node] = []
        let reverse: Bool

        init(root: Node?, start: [UInt8]?, reverse: Bool) {
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

        mutating func next() -> (key: [UInt8], value: Value)? {
            guard let node = stack.popLast() else { return nil }
            var child = reverse ? node.left : node.right
            while let current = child {
                stack.append(current)
                child = reverse ? current.right : current.left
            }
            return (node.key, node.value)
        }
    }
}
