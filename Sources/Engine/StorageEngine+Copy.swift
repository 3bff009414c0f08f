// Copies of a live store: `backup(to:)` copies the files as they stand (the data file as
// of the last checkpoint plus the log after it), `compact(to:)` writes a fresh store
// holding just the live keys of one snapshot. Both run while commits continue.
//
// A copy is built in a directory marked by an `INCOMPLETE` file, made durable before any
// store file is written and removed (then the directory synced) only after every file of
// the copy is synced: a copy stopped at any moment either is whole or is refused by every
// open (`EngineError.incompleteCopy`), never a store with keys missing.
import StrataFileIO
import StrataWAL

/// What a copy wrote.
public struct CopyReport: Sendable {
    /// The version the copy opens at.
    public var version: UInt64
    /// Keys copied (compact) and bytes written.
    public var keyCount = 0
    public var byteCount = 0
}

extension StorageEngine {
    /// Writes a consistent copy of the store into the directory `destination` (created; it
    /// must not hold a store): the data file and the log segments up to the last written
    /// batch. Until the copy is whole, an `INCOMPLETE` file marks it (see the top of this file). Commits continue meanwhile; checkpoints wait. Opening the copy recovers the
    /// state of the version reported. `progress` is called with the bytes copied so far
    /// and the bytes to copy. Throws `EngineError`.
    @discardableResult
    public func backup(to destination: String, progress: (_ copied: Int, _ total: Int) -> Void = { _, _ in }) throws -> CopyReport {
        if readerSlot != nil { return try backupBesideWriter(to: destination, progress: progress) }
        return try checkpointLock.withLock { _ in
            try mapIOErrors {
                try prepareDestination(destination)
                var report = CopyReport(version: 0)
                let dataBytes = Int(try pageFile.file.size())
                let extent = logExtent
                let (segments, activeBytes, lastLSN) = (extent.segmentPaths, extent.activeBytes, extent.lastLSN)
                // Sealed segments are copied whole, the active one up to its last frame; the copy
                // keeps the file's size (the rest reads as zeros), since a segment shorter
                // than its header's capacity reads as one cut short.
                let sources = try segments.enumerated().map { index, path in
                    let source = try fileSystem.open(path, options: [])
                    let size = Int(try source.size())
                    return (source, path, index == segments.count - 1 ? activeBytes : size, size)
                }
                defer { for (source, _, _, _) in sources { try? source.close() } }
                let total = dataBytes + sources.reduce(0) { $0 + $1.2 }
                var copiedBefore = 0
                let copied = { (done: Int) in progress(copiedBefore + done, total) }
                copiedBefore = try copyFile(pageFile.file, bytes: dataBytes, to: joinPath(destination, Self.dataFileName),
                                            progress: copied)
                let logDirectory = joinPath(destination, Self.logDirectoryName)
                try fileSystem.createDirectoryDurably(logDirectory)
                for (source, path, bytes, size) in sources {
                    let name = String(path.split(separator: "/").last ?? "")
                    let done = try copyFile(source, bytes: bytes, to: joinPath(logDirectory, name), size: size, progress: copied)
                    copiedBefore += done
                }
                report.byteCount = copiedBefore
                try fileSystem.syncDirectory(logDirectory)
                try finishCopy(destination)
                report.version = lastLSN.rawValue
                return report
            }
        }
    }

    /// A read-only store's backup, while a writer may be running in another process: the
    /// version this store reads, copied as it stands on disk. Its tree's pages (pinned, so
    /// the writer leaves them alone) are copied with the data file's first pages, both meta
    /// slots are given this tree's meta page (the file may hold a newer one, whose pages
    /// the copy lacks), and the log's segments from the tree's checkpoint on are copied up
    /// to the last batch of this version, with the log pinned meanwhile.
    private func backupBesideWriter(to destination: String, progress: (Int, Int) -> Void) throws -> CopyReport {
        guard let slot = readerSlot else { throw EngineError.readOnly(path: path) }
        try mapIOErrors { try prepareDestination(destination) }
        for attempt in 1...50 {
            do {
                return try refreshLock.withLock { _ in
                    try copyPinnedVersion(to: destination, slot: slot, progress: progress)
                }
            } catch where attempt < 50 && Self.movesOn(error) {
                // A checkpoint may release the log of this version before it sees the pin:
                // move to the newest version (its log pinned the same way) and copy that.
                options.logger.debug("backup moves to a newer version", metadata: ["path": "\(path)", "error": "\(error)"])
                try refresh()
            }
        }
        throw EngineError.inUse(path: path, holder: "its writer released the log of every version this backup tried; retry")
    }

    /// The data file holds a newer tree than the one a read-only store's backup pinned.
    private struct NewerTree: Error {}

    /// Whether a backup beside a writer should move to the newest version and try again:
    /// the version's log or a file of it went, or a newer tree came.
    private static func movesOn(_ error: any Error) -> Bool {
        switch error {
        case is WALError, is NewerTree, EngineError.io(.notFound), EngineError.log: true
        default: false
        }
    }

    private func copyPinnedVersion(to destination: String, slot: ReaderSlot, progress: (Int, Int) -> Void) throws -> CopyReport {
        let meta = checkpointLock.withLock { $0.meta }
        let version = snapshots.current.version
        slot.pin(logFrom: meta.checkpointVersion + 1)
        defer { slot.pin(logFrom: ReaderTable.none) }
        // A checkpoint that read the slots before the pin wrote its meta page first: with
        // a newer meta page in the file, move to it (ReaderTable.T1).
        guard try Self.readMeta(pageFile.file, path: pageFile.path).0.generation == meta.generation else { throw NewerTree() }
        let logDirectory = joinPath(path, Self.logDirectoryName)
        let (_, extent) = try WriteAheadLog.readForReplay(
            directory: logDirectory, fileSystem: fileSystem, options: Self.logOptions(options, checkpointVersion: meta.checkpointVersion),
            through: LSN(version), skippingSegmentsBefore: LSN(meta.checkpointVersion + 1)) { _ in }
        guard extent.lastLSN.rawValue >= version else {
            throw WALError.missingData(path: logDirectory, reason: "the log ends at \(extent.lastLSN) before version \(version)")
        }
        return try mapIOErrors {
            var report = CopyReport(version: version)
            let dataBytes = Int(meta.pageCount) * pageFile.pageBytes
            let sources = try extent.segmentPaths.enumerated().map { index, path in
                let source = try fileSystem.open(path, options: [])
                let size = Int(try source.size())
                return (source, path, index == extent.segmentPaths.count - 1 ? extent.activeBytes : size, size)
            }
            defer { for (source, _, _, _) in sources { try? source.close() } }
            let total = dataBytes + sources.reduce(0) { $0 + $1.2 }
            var copiedBefore = 0
            let copied = { (done: Int) in progress(copiedBefore + done, total) }
            let dataPath = joinPath(destination, Self.dataFileName)
            copiedBefore = try copyFile(pageFile.file, bytes: dataBytes, to: dataPath, progress: copied)
            let data = try fileSystem.open(dataPath, options: [.write])
            defer { try? data.close() }
            for slot in 0..<2 { try data.write(meta.encoded(), at: Int64(slot * pageFile.pageBytes)) }
            try data.syncData()
            try fileSystem.createDirectoryDurably(joinPath(destination, Self.logDirectoryName))
            for (source, path, bytes, size) in sources {
                let name = String(path.split(separator: "/").last ?? "")
                copiedBefore += try copyFile(source, bytes: bytes, to: joinPath(joinPath(destination, Self.logDirectoryName), name), size: size,
                                             progress: copied)
            }
            report.byteCount = copiedBefore
            try fileSystem.syncDirectory(joinPath(destination, Self.logDirectoryName))
            try finishCopy(destination)
            return report
        }
    }

    /// Writes a new store into `destination` holding the live keys of the latest version
    /// (no free pages, no tombstones, no log history), in batches, while commits continue.
    /// Until the copy is whole, an `INCOMPLETE` file marks it (see the top of this file).
    /// `progress` is called with the keys copied so far. Throws `EngineError`.
    @discardableResult
    public func compact(to destination: String, progress: (Int) -> Void = { _ in }) throws -> CopyReport {
        let source = snapshot()
        try mapIOErrors { try prepareDestination(destination) }
        var targetOptions = options
        targetOptions.completingCopy = true
        // The copy's own loading batches are no one's history (FORMAT.md, "History").
        targetOptions.log.history = .none
        let (target, _) = try StorageEngine.open(path: destination, fileSystem: fileSystem, options: targetOptions)
        var report = CopyReport(version: source.version)
        var cursor = try source.cursor()
        var batch = WALBatch()
        var batchBytes = 0
        while let (key, value) = try cursor.next() {
            batch.put(key, value)
            batchBytes += key.count + value.count
            report.keyCount += 1
            if batchBytes >= 1 << 20 {
                try target.commit(batch)
                batch = WALBatch()
                batchBytes = 0
                progress(report.keyCount)
            }
        }
        if !batch.operations.isEmpty { try target.commit(batch) }
        progress(report.keyCount)
        // The close checkpoints every batch into the data file and syncs it.
        try target.close()
        report.byteCount = try mapIOErrors {
            let data = try fileSystem.open(joinPath(destination, Self.dataFileName), options: [])
            defer { try? data.close() }
            let size = Int(try data.size())
            try finishCopy(destination)
            return size
        }
        return report
    }

    /// Creates `destination`, refusing one that already holds a store or a stopped copy,
    /// and marks it incomplete: the marker is durable before any file of the copy exists.
    private func prepareDestination(_ destination: String) throws {
        let marker = joinPath(destination, Self.incompleteMarkerName)
        guard !fileSystem.fileExists(marker) else { throw EngineError.incompleteCopy(path: destination) }
        guard !fileSystem.fileExists(joinPath(destination, Self.dataFileName)),
              !fileSystem.fileExists(joinPath(destination, Self.logDirectoryName)) else {
            throw FileIOError.alreadyExists(operation: .createDirectory, path: destination)
        }
        try fileSystem.createDirectoryDurably(destination)
        let file = try fileSystem.open(marker, options: [.create, .exclusive, .write])
        defer { try? file.close() }
        try file.write(Array("A copy of \(path) is being written here; until this file is gone it is not a store.\n".utf8), at: 0)
        try file.syncData()
        try fileSystem.syncDirectory(destination)
    }

    /// Makes a copy whose files are all synced whole: removes its marker and syncs the
    /// directory (the moment the copy becomes a store).
    private func finishCopy(_ destination: String) throws {
        try fileSystem.removeFile(joinPath(destination, Self.incompleteMarkerName))
        try fileSystem.syncDirectory(destination)
    }

    /// Copies the first `bytes` bytes of `source` to a new file at `path`, extends it with
    /// zeros to `size` bytes when given, and syncs it, telling `progress` the bytes copied
    /// after each chunk.
    private func copyFile(_ source: any OpenFile, bytes: Int, to path: String, size: Int? = nil,
                          progress: (Int) -> Void) throws -> Int {
        let target = try fileSystem.open(path, options: [.create, .exclusive, .write])
        defer { try? target.close() }
        let chunkBytes = 1 << 20
        var offset = 0
        while offset < bytes {
            let chunk = try source.read(count: min(chunkBytes, bytes - offset), at: Int64(offset))
            guard !chunk.isEmpty else { break }
            try chunk.withUnsafeBytes { try target.write($0, at: Int64(offset)) }
            offset += chunk.count
            progress(offset)
        }
        if let size, size > offset { try target.truncate(to: Int64(size)) }
        try target.syncData()
        return offset
    }

    private func mapIOErrors<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as FileIOError { throw EngineError.io(error) }
    }
}
