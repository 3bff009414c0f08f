// Merging a child into its parent, and moving a root to the latest version: the two
// places where a context's writes meet writes made after it forked, settled by its
// merge policy (MergePolicy.swift).
import StrataEngine

extension Context {
    /// Merges this child's overlay into `parent` (no I/O) under `mergePolicy` and ends
    /// the child. O(k log n) for k staged keys.
    func merge(into parent: Context) throws -> CommitReceipt {
        try parent.checkOpen()
        let forkOverlay = base?.overlay ?? Overlay()
        let conflicts = parent.overlay.keysChanged(since: forkOverlay, among: overlay)
        if !conflicts.isEmpty && mergePolicy == .error {
            throw ContextError.mergeConflict(keys: conflicts)
        }
        let skipped = mergePolicy == .parentWins ? Set(conflicts) : []
        var merged = parent.overlay
        var iterator = overlay.entries()
        while let (key, entry) = iterator.next() {
            if !skipped.contains(key) { merged.updateValue(entry, forKey: key) }
        }
        let receipt = CommitReceipt(version: snapshot.version, changeCount: overlay.count - skipped.count,
                                    rawByteCount: 0, storedByteCount: 0, groupSize: 0, latency: .zero)
        let before = parent.overlay
        parent.replaceOverlay(merged)
        if !conflicts.isEmpty {
            // Both sides' versions of a settled record may have left index entries.
            let sides: [([UInt8]) throws -> [UInt8]?] = [
                { key in try parent.read(key, overlay: before) }, { key in try self.get(key) },
                { key in try self.read(key, overlay: Overlay()) },
            ]
            do { try parent.repairIndexes(after: conflicts, sides: sides) } catch {
                parent.replaceOverlay(before)
                throw error
            }
        }
        endCommitted()
        return receipt
    }

    /// Moves this root context to the store's latest version, keeping its staged writes.
    /// A key it wrote that another commit changed since its snapshot is settled by
    /// `mergePolicy`: `.error` throws `ContextError.mergeConflict` and changes nothing,
    /// `.childWins` keeps this context's write, `.parentWins` drops it. Throws
    /// `ContextError.notRoot`, `.childrenOpen`, `.finished`, or `EngineError`.
    public func refresh() throws {
        try checkOpen()
        guard parent == nil else { throw ContextError.notRoot }
        guard openChildCount == 0 else { throw ContextError.childrenOpen(count: openChildCount) }
        let latest = store.engine.snapshot()
        var conflicts: [[UInt8]] = []
        var iterator = overlay.entries()
        while let (key, entry) = iterator.next() {
            if entry.isChecked, try latest.lastWriteVersion(key) > snapshot.version { conflicts.append(key) }
        }
        let (previousOverlay, previousSnapshot) = (overlay, snapshot)
        if !conflicts.isEmpty {
            switch mergePolicy {
            case .error:
                throw ContextError.mergeConflict(keys: conflicts)
            case .childWins:
                break
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
        guard !conflicts.isEmpty else { return }
        // Ours, theirs and the old snapshot's versions of a settled record may each have
        // left index entries.
        let sides: [([UInt8]) throws -> [UInt8]?] = [
            { key in try self.read(key, overlay: previousOverlay, snapshot: previousSnapshot) },
            { key in try latest.get(key) }, { key in try previousSnapshot.get(key) },
        ]
        do { try repairIndexes(after: conflicts, sides: sides) } catch {
            replaceOverlay(previousOverlay)
            replaceSnapshot(previousSnapshot)
            throw error
        }
    }

    /// `key` as this context would read it with `overlay` as its own (and `snapshot`
    /// beneath its ancestors' overlays, when given).
    func read(_ key: [UInt8], overlay: Overlay, snapshot: Snapshot? = nil) throws -> [UInt8]? {
        if let entry = overlay[key] { return entry.value }
        var layer = base
        while let current = layer {
            if let entry = current.overlay[key] { return entry.value }
            layer = current.next
        }
        return try (snapshot ?? self.snapshot).get(key)
    }

    /// After a merge or refresh settled `conflicts` key by key, makes the index entries of
    /// every record behind them (a conflicting record key, or the records a conflicting
    /// index entry named on any side) exactly those its value now implies: entries any
    /// side's version left that the value does not imply are removed, and its own are
    /// staged. Throws `RecordError.uniqueViolation` when another record holds one of them,
    /// a record's decoding error when its value cannot be read as its type.
    func repairIndexes(after conflicts: [[UInt8]], sides: [([UInt8]) throws -> [UInt8]?]) throws {
        var records = Set<[UInt8]>()
        for key in conflicts {
            if RecordKeys.entityPrefix(of: key, tag: RecordKeys.recordTag) != nil {
                records.insert(key)
            } else if let prefix = RecordKeys.recordPrefix(ofIndexKey: key) {
                for side in sides { if let id = try side(key) { records.insert(prefix + id) } }
            }
        }
        for record in records.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            guard let (_, derive) = RecordTypeCache.deriver(forRecordKey: record) else { continue }
            let implied = try get(record).map(derive) ?? []
            let keep = Set(implied.map(\.key))
            for side in sides {
                // A version that no longer decodes as the type cannot have been indexed by it.
                guard let bytes = try side(record), let entries = try? derive(bytes) else { continue }
                for entry in entries where !keep.contains(entry.key) {
                    if try get(entry.key) == entry.value { try stage(entry.key, nil) }
                }
            }
            for entry in implied {
                let holder = try get(entry.key)
                guard holder != entry.value else { continue }
                if let holder, let prefix = RecordKeys.entityPrefix(of: record, tag: RecordKeys.recordTag),
                   let other = try get(Array(prefix) + holder),
                   (try? derive(other))?.contains(where: { $0.key == entry.key }) == true {
                    throw RecordError.uniqueViolation(entity: entityName(of: record), index: entry.index, value: entry.rendered)
                }
                try stage(entry.key, entry.value)
            }
        }
    }

    private func entityName(of recordKey: [UInt8]) -> String {
        guard let prefix = RecordKeys.entityPrefix(of: recordKey, tag: RecordKeys.recordTag) else { return "record" }
        return RecordKeys.entityName(ofPrefix: Array(prefix))
    }
}
