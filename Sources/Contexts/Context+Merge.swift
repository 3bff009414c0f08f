// Merging a child into its parent, and moving a root to the latest version: the two
// places where a context's writes meet writes made after it forked, settled by its
// merge policy (MergePolicy.swift).
import StrataEngine

extension Context {
    /// Merges this child's overlay into `parent` (no I/O) under `mergePolicy` and ends
    /// the child. O(k log n) for k staged keys. A key the parent wrote since the fork in a
    /// range the child read (Context.C4) is no conflict of keys: the layers above settle it
    /// (`ContextSettling`), under the merge policy too.
    func merge(into parent: Context) throws -> CommitReceipt {
        try parent.checkOpen()
        let forkOverlay = base?.overlay ?? Overlay()
        let conflicts = parent.overlay.keysChanged(since: forkOverlay, among: overlay)
        if !conflicts.isEmpty && mergePolicy == .error {
            throw ContextError.mergeConflict(keys: conflicts)
        }
        let readConflicts = parent.overlay.keysChanged(since: forkOverlay, in: readRanges)
        let skipped = mergePolicy == .parentWins ? Set(conflicts) : []
        var merged = parent.overlay
        var iterator = overlay.entries()
        while let (key, entry) = iterator.next() {
            if !skipped.contains(key) { merged.updateValue(entry, forKey: key) }
        }
        let receipt = CommitReceipt(version: snapshot.version, changeCount: overlay.count - skipped.count,
                                    rawByteCount: 0, storedByteCount: 0, groupSize: 0, latency: .zero)
        let (before, beforeRanges) = (parent.overlay, parent.readRanges)
        parent.replaceOverlay(merged)
        parent.replaceReadRanges(beforeRanges + readRanges)
        if !conflicts.isEmpty || !readConflicts.isEmpty {
            // Both sides' versions of a settled key may have left what a layer above derived
            // from them (a record's index entries): the layers settle it.
            let sides: [([UInt8]) throws -> [UInt8]?] = [
                { key in try parent.read(key, overlay: before) }, { key in try self.get(key) },
                { key in try self.read(key, overlay: Overlay()) },
            ]
            do {
                try store.layers.settle(parent, conflicts: conflicts, readConflicts: readConflicts, policy: mergePolicy, sides: sides)
            } catch {
                parent.replaceOverlay(before)
                parent.replaceReadRanges(beforeRanges)
                throw error
            }
        }
        endCommitted()
        return receipt
    }

    /// Moves this root context to the store's latest version, keeping its staged writes.
    /// A key it wrote that another commit changed since its snapshot is settled by
    /// `mergePolicy`: `.error` throws `ContextError.mergeConflict` and changes nothing,
    /// `.childWins` keeps this context's write, `.parentWins` drops it; a key another
    /// commit wrote in a range this context read (Context.C4) is settled by the layers above.
    /// Throws
    /// `ContextError.notRoot`, `.childrenOpen`, `.finished`, or `EngineError`.
    public func refresh() throws {
        try checkOpen()
        guard parent == nil else { throw ContextError.notRoot }
        guard openChildCount == 0 else { throw ContextError.childrenOpen(count: openChildCount) }
        let latest = store.engine.snapshot()
        var conflicts: [[UInt8]] = []
        var iterator = overlay.entries()
        while let (key, entry) = iterator.next() {
            if entry.isChecked, try latest.wasWritten(key, after: snapshot.version) { conflicts.append(key) }
        }
        var readConflicts = Set<[UInt8]>()
        for range in readRanges { readConflicts.formUnion(try latest.keysWritten(in: range, after: snapshot.version)) }
        let (previousOverlay, previousSnapshot) = (overlay, snapshot)
        if !conflicts.isEmpty {
            switch mergePolicy {
            case .error:
                throw ContextError.mergeConflict(keys: conflicts)
            case .childWins:
                // Kept, but what their writes read of their keys no longer holds (Context.C6).
                var cleared = overlay
                for key in conflicts {
                    guard var entry = cleared[key], entry.snapshotHolds != nil else { continue }
                    entry.snapshotHolds = nil
                    cleared.updateValue(entry, forKey: key)
                }
                replaceOverlay(cleared)
            case .parentWins:
                let dropped = Set(conflicts)
                var kept: [(key: [UInt8], value: OverlayEntry)] = []
                var all = overlay.entries()
                while let pair = all.next() {
                    if !dropped.contains(pair.key) { kept.append(pair) }
                }
                replaceOverlay(Overlay(sortedUnique: kept))
            }
        }
        replaceSnapshot(latest)
        guard !conflicts.isEmpty || !readConflicts.isEmpty else { return }
        // Ours, theirs and the old snapshot's versions of a settled key may each have left
        // what a layer above derived from them: the layers settle it.
        let sides: [([UInt8]) throws -> [UInt8]?] = [
            { key in try self.read(key, overlay: previousOverlay, snapshot: previousSnapshot) },
            { key in try latest.get(key) }, { key in try previousSnapshot.get(key) },
        ]
        let settledReads = readConflicts.sorted { compareKeys($0, $1) < 0 }
        do { try store.layers.settle(self, conflicts: conflicts, readConflicts: settledReads, policy: mergePolicy, sides: sides) } catch {
            replaceOverlay(previousOverlay)
            replaceSnapshot(previousSnapshot)
            throw error
        }
    }

    /// `key` as this context would read it with `overlay` as its own (and `snapshot`
    /// beneath its ancestors' overlays, when given).
    func read(_ key: [UInt8], overlay: Overlay, snapshot: Snapshot? = nil) throws -> [UInt8]? {
        if let entry = stagedEntry(key, overlay: overlay) { return entry.value }
        return try (snapshot ?? self.snapshot).get(key)
    }

    /// `read` beneath this context's own snapshot, and whether that snapshot holds `key`
    /// when the read learned it: it went down to the snapshot, or the entry it found knew
    /// (Context.C6).
    func readNotingSnapshot(_ key: [UInt8], overlay: Overlay) throws -> (value: [UInt8]?, snapshotHolds: Bool?) {
        if let entry = stagedEntry(key, overlay: overlay) { return (entry.value, entry.snapshotHolds) }
        let value = try snapshot.get(key)
        return (value, value != nil)
    }

    /// The entry for `key` in `overlay`, else in the nearest ancestor's overlay that has one.
    private func stagedEntry(_ key: [UInt8], overlay: Overlay) -> OverlayEntry? {
        if let entry = overlay[key] { return entry }
        var layer = base
        while let current = layer {
            if let entry = current.overlay[key] { return entry }
            layer = current.next
        }
        return nil
    }
}
