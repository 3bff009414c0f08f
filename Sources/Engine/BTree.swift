// The read side of the copy-on-write B+tree: point lookups and ordered iteration over one
// immutable tree (a root and a height from a meta page or a checkpoint).
//
// Invariants (checked by `verify`):
//  T1. Every leaf is at depth `height`; no loop descends further (a corrupt child pointer
//      cannot make a read loop).
//  T2. Keys are strictly increasing within a page and across pages in tree order; every
//      key under branch entry i is ≥ its key and < the key of entry i + 1.
// Thread-safety: a tree is immutable; any thread may read it while a snapshot pins it.

/// One version of the B+tree.
struct BTree: Sendable, Equatable {
    var root: PageID
    var height: Int

    static let empty = BTree(root: .none, height: 0)

    /// The entry for `key` (a tombstone included), or nil. O(height) page reads.
    func entry(_ key: [UInt8], file: PageFile) throws -> LeafEntry? {
        try key.withUnsafeBytes { key in try withCell(key, file: file) { $0?.entry } }
    }

    /// Calls `body` with the leaf cell for `key` (a tombstone included), or nil, borrowed
    /// from its page: nothing is copied. O(height) page reads.
    @inline(__always)
    func withCell<Result>(_ key: UnsafeRawBufferPointer, file: PageFile, _ body: (LeafCell?) throws -> Result) throws -> Result {
        guard root != .none else { return try body(nil) }
        guard height >= 1 else { throw corrupt(file, root, "a tree of height \(height) has a root") }
        var id = root
        for _ in 1..<height {
            id = try file.withPage(id) { page in
                guard page.type == .branch else { throw PageDefect("a leaf above the bottom level") }
                return try page.child(for: key)
            }
        }
        return try file.withPage(id) { page in
            guard page.type == .leaf else { throw PageDefect("a branch where a leaf belongs") }
            return try body(page.leafCell(for: key))
        }
    }

    /// Entries in key order starting at the first key ≥ `start` (forward) or ≤ `start`
    /// (reverse); a nil start begins at the first (or last) key.
    func cursor(from start: [UInt8]?, reverse: Bool, file: PageFile) throws -> TreeCursor {
        var cursor = TreeCursor(tree: self, file: file, reverse: reverse)
        try cursor.seek(start)
        return cursor
    }
}

/// The index of the child of a branch whose range holds `key`.
func childIndex(_ entries: [BranchEntry], for key: [UInt8]) -> Int {
    // The last entry (after the leftmost) whose key is ≤ key.
    var low = 1
    var high = entries.count
    while low < high {
        let middle = (low + high) / 2
        if compareKeys(entries[middle].key, key) <= 0 { low = middle + 1 } else { high = middle }
    }
    return low - 1
}

/// The index of the first leaf entry whose key is ≥ `key`.
func lowerBound(_ entries: [LeafEntry], _ key: [UInt8]) -> Int {
    var low = 0
    var high = entries.count
    while low < high {
        let middle = (low + high) / 2
        if compareKeys(entries[middle].key, key) < 0 { low = middle + 1 } else { high = middle }
    }
    return low
}

func corrupt(_ file: PageFile, _ id: PageID, _ reason: String) -> EngineError {
    .corruptPage(path: file.path, offset: id.offset(pageBytes: file.pageBytes), reason: reason)
}

/// Walks a tree's leaves in order with a stack of branch positions (no sibling pointers:
/// copy-on-write trees have none).
struct TreeCursor {
    let tree: BTree
    let file: PageFile
    let reverse: Bool
    private var path: [(entries: [BranchEntry], index: Int)] = []
    private var leaf: [LeafEntry] = []
    private var position = 0

    init(tree: BTree, file: PageFile, reverse: Bool) {
        self.tree = tree
        self.file = file
        self.reverse = reverse
    }

    /// Positions the cursor at the first entry at or after (before, in reverse) `key`.
    mutating func seek(_ key: [UInt8]?) throws {
        path.removeAll()
        leaf = []
        position = 0
        guard tree.root != .none else { return }
        var id = tree.root
        for level in 1...tree.height {
            switch try file.node(id) {
            case let .branch(entries):
                guard level < tree.height else { throw corrupt(file, id, "a branch where a leaf belongs") }
                let index = key.map { childIndex(entries, for: $0) } ?? (reverse ? entries.count - 1 : 0)
                path.append((entries, index))
                id = entries[index].child
            case let .leaf(entries):
                guard level == tree.height else { throw corrupt(file, id, "a leaf above the bottom level") }
                leaf = entries
                if let key {
                    let index = lowerBound(entries, key)
                    if reverse {
                        position = index < entries.count && compareKeys(entries[index].key, key) == 0 ? index : index - 1
                    } else {
                        position = index
                    }
                } else {
                    position = reverse ? entries.count - 1 : 0
                }
                return
            }
        }
    }

    /// The next entry in the cursor's direction, or nil at the end.
    mutating func next() throws -> LeafEntry? {
        while true {
            if position >= 0 && position < leaf.count {
                defer { position += reverse ? -1 : 1 }
                return leaf[position]
            }
            guard try advanceLeaf() else { return nil }
        }
    }

    /// Moves to the neighbouring leaf; false at the end of the tree.
    private mutating func advanceLeaf() throws -> Bool {
        while var top = path.popLast() {
            top.index += reverse ? -1 : 1
            guard top.index >= 0 && top.index < top.entries.count else { continue }
            path.append(top)
            var id = top.entries[top.index].child
            while path.count < tree.height - 1 {
                guard case let .branch(entries) = try file.node(id) else { throw corrupt(file, id, "a leaf above the bottom level") }
                let index = reverse ? entries.count - 1 : 0
                path.append((entries, index))
                id = entries[index].child
            }
            guard case let .leaf(entries) = try file.node(id) else { throw corrupt(file, id, "a branch where a leaf belongs") }
            leaf = entries
            position = reverse ? entries.count - 1 : 0
            return true
        }
        return false
    }
}
