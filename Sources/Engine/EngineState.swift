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
    /// Changes being folded into the tree by a running checkpoint (nil when none runs).
    let frozen: Memtable?
    /// Changes since the last checkpoint started.
    let active: Memtable

    init(version: UInt64, tree: BTree, treeGeneration: UInt64, frozen: Memtable?, active: Memtable) {
        self.version = version
        self.tree = tree
        self.treeGeneration = treeGeneration
        self.frozen = frozen
        self.active = active
    }

    func with(version: UInt64? = nil, tree: BTree? = nil, treeGeneration: UInt64? = nil, frozen: Memtable?? = nil,
              active: Memtable? = nil) -> EngineState {
        EngineState(version: version ?? self.version, tree: tree ?? self.tree,
                    treeGeneration: treeGeneration ?? self.treeGeneration,
                    frozen: frozen ?? self.frozen, active: active ?? self.active)
    }
}
