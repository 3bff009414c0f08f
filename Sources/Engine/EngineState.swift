// What a reader sees: one immutable view of the store, published whole after each commit
// and checkpoint. A snapshot holds one and pins its tree so that no checkpoint reuses the
// tree's pages while the snapshot lives.

/// An immutable view of the store as of `version`.
final class EngineState: Sendable {
    /// The last commit this view includes.
    let version: UInt64
    /// The B+tree as of the last checkpoint, and that checkpoint's generation.
    let tree: BTree
    let treeGeneration: UInt64
    /// The last version folded into `tree` (its checkpoint's, `MetaPage.checkpointVersion`):
    /// no entry of the tree is newer, so a key the memtables do not hold was not written
    /// after any version at or above it, and the tree need not be read to say so.
    let treeVersion: UInt64
    /// Changes being folded into the tree by a running checkpoint (nil when none runs), or
    /// left by one a close stopped, for the close's checkpoint to fold.
    let frozen: Memtable?
    /// Changes since the last checkpoint started.
    let active: Memtable

    init(version: UInt64, tree: BTree, treeGeneration: UInt64, treeVersion: UInt64, frozen: Memtable?, active: Memtable) {
        self.version = version
        self.tree = tree
        self.treeGeneration = treeGeneration
        self.treeVersion = treeVersion
        self.frozen = frozen
        self.active = active
    }

    func with(version: UInt64? = nil, frozen: Memtable?? = nil, active: Memtable? = nil) -> EngineState {
        EngineState(version: version ?? self.version, tree: tree, treeGeneration: treeGeneration, treeVersion: treeVersion,
                    frozen: frozen ?? self.frozen, active: active ?? self.active)
    }

    /// This view with `tree`, the tree of checkpoint `generation` holding every change
    /// through `treeVersion`, in place of its own, and no frozen memtable.
    func with(tree: BTree, generation: UInt64, treeVersion: UInt64) -> EngineState {
        EngineState(version: version, tree: tree, treeGeneration: generation, treeVersion: treeVersion, frozen: nil, active: active)
    }
}

extension EngineState {
    /// The keys in `range` that a change newer than `version` wrote (a put or a delete),
    /// in key order and each once: in either memtable every change of a key is a node,
    /// and the tree keeps each key's last change with its version, tombstones included,
    /// until no snapshot older than them lives (so a snapshot at `version` keeps what it
    /// needs). O(log n + k) for the k changes the range holds.
    func keysWritten(in range: KeyRange, after version: UInt64, file: PageFile) throws -> [[UInt8]] {
        var found = Set<[UInt8]>()
        let lower = range.lower ?? []
        for memtable in [active, frozen].compactMap({ $0 }) where !memtable.isEmpty {
            memtable.linkDeferred()
            var node = lower.withUnsafeBytes { memtable.firstNode(atLeast: $0) }
            while let current = node {
                if let upper = range.upper, upper.withUnsafeBytes({ current.compare(with: $0) >= 0 }) { break }
                if current.version > version { found.insert(Array(current.key)) }
                node = current.next(0)
            }
        }
        // No entry of the tree is newer than its checkpoint (`treeVersion`).
        guard treeVersion > version else { return found.sorted { compareKeys($0, $1) < 0 } }
        var cursor = try tree.cursor(from: range.lower, reverse: false, file: file)
        while let key = try cursor.currentKey() {
            if let upper = range.upper, upper.withUnsafeBytes({ compareBytes(key, $0) >= 0 }) { break }
            if try cursor.currentVersion() > version { found.insert(Array(key)) }
            try cursor.advance()
        }
        return found.sorted { compareKeys($0, $1) < 0 }
    }
}
