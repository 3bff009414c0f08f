// Bulk updates of a persistent map by join-based union (Blelloch, Ferizovic and Sun,
// "Just Join for Parallel Ordered Sets", 2016): a sorted batch is built into a balanced
// tree in O(m) and merged in O(m log(n/m + 1)) — for keys appended after every existing
// one, O(m + log n) — instead of m separate O(log n) insertions with their path copies.
// Keeps M1 and M2 of PersistentSortedMap.swift.

extension PersistentSortedMap {
    /// This map with every entry of `other` added, `other`'s value winning for a key both
    /// hold; `replaced` is called with each key and value of this map that lost.
    public func merging(_ other: PersistentSortedMap,
                        replaced: ([UInt8], Value) -> Void = { _, _ in }) -> PersistentSortedMap {
        var result = PersistentSortedMap()
        var lost = 0
        result.root = Self.union(root, other.root) { key, value in
            lost += 1
            replaced(key, value)
        }
        result.storedCount = count + other.count - lost
        return result
    }

    private static func height(_ node: Node?) -> Int { node?.height ?? 0 }

    private static func union(_ base: Node?, _ winner: Node?, replaced: ([UInt8], Value) -> Void) -> Node? {
        guard let winner else { return base }
        guard let base else { return winner }
        let (left, found, right) = split(base, at: winner.key)
        if let found { replaced(winner.key, found) }
        return join(union(left, winner.left, replaced: replaced), winner.key, winner.value,
                    union(right, winner.right, replaced: replaced))
    }

    /// The entries below `key`, the value at `key`, and the entries above it.
    private static func split(_ node: Node?, at key: [UInt8]) -> (Node?, Value?, Node?) {
        guard let node else { return (nil, nil, nil) }
        let order = compareKeys(key, node.key)
        if order == 0 { return (node.left, node.value, node.right) }
        if order < 0 {
            let (left, found, right) = split(node.left, at: key)
            return (left, found, join(right, node.key, node.value, node.right))
        }
        let (left, found, right) = split(node.right, at: key)
        return (join(node.left, node.key, node.value, left), found, right)
    }

    /// A balanced tree of `left`, then (`key`, `value`), then `right`; every key of `left`
    /// is below `key` and every key of `right` above it.
    private static func join(_ left: Node?, _ key: [UInt8], _ value: Value, _ right: Node?) -> Node {
        if height(left) > height(right) + 1, let left { return joinRight(left, key, value, right) }
        if height(right) > height(left) + 1, let right { return joinLeft(left, key, value, right) }
        return Node(key: key, value: value, left: left, right: right)
    }

    /// `join` when `left` is the taller: descend its right spine.
    private static func joinRight(_ left: Node, _ key: [UInt8], _ value: Value, _ right: Node?) -> Node {
        let inner = left.right
        if height(inner) <= height(right) + 1 {
            let middle = Node(key: key, value: value, left: inner, right: right)
            if middle.height <= height(left.left) + 1 {
                return Node(key: left.key, value: left.value, left: left.left, right: middle)
            }
            return rotateLeft(Node(key: left.key, value: left.value, left: left.left, right: rotateRight(middle)))
        }
        let joined = joinRight(inner!, key, value, right)
        let result = Node(key: left.key, value: left.value, left: left.left, right: joined)
        return joined.height <= height(left.left) + 1 ? result : rotateLeft(result)
    }

    /// `join` when `right` is the taller: descend its left spine.
    private static func joinLeft(_ left: Node?, _ key: [UInt8], _ value: Value, _ right: Node) -> Node {
        let inner = right.left
        if height(inner) <= height(left) + 1 {
            let middle = Node(key: key, value: value, left: left, right: inner)
            if middle.height <= height(right.right) + 1 {
                return Node(key: right.key, value: right.value, left: middle, right: right.right)
            }
            return rotateRight(Node(key: right.key, value: right.value, left: rotateLeft(middle), right: right.right))
        }
        let joined = joinLeft(left, key, value, inner!)
        let result = Node(key: right.key, value: right.value, left: joined, right: right.right)
        return joined.height <= height(right.right) + 1 ? result : rotateRight(result)
    }

    private static func rotateLeft(_ node: Node) -> Node {
        guard let pivot = node.right else { return node }
        return Node(key: pivot.key, value: pivot.value,
                    left: Node(key: node.key, value: node.value, left: node.left, right: pivot.left), right: pivot.right)
    }

    private static func rotateRight(_ node: Node) -> Node {
        guard let pivot = node.left else { return node }
        return Node(key: pivot.key, value: pivot.value, left: pivot.left,
                    right: Node(key: node.key, value: node.value, left: pivot.right, right: node.right))
    }
}
