// Opening a store: take the locks (a writer's, or a read-only opener's shared one), create
// or read the data file, choose the newest valid meta page, load the free list, and replay
// the log into the memtable (a read-only open replays it in memory and changes nothing).
import Foundation
import StrataFileIO
import StrataLocks
import StrataWAL

/// What opening a store found.
public struct RecoveryReport: Sendable {
    /// The last version folded into the data file, and the last durable version overall.
    public var checkpointVersion: UInt64
    public var lastDurableVersion: UInt64
    /// The meta page chosen, and why the other one was not (nil when both were valid).
    public var metaGeneration: UInt64
    public var rejectedMeta: String?
    /// What the write-ahead log's recovery found (batches replayed, damage, bytes cut off).
    public var log: WALRecoveryReport
    /// Batches applied to the memtable (those after the checkpoint).
    public var batchesReplayed: Int
}

/// One version of a store as an open (or a reader's refresh) read it.
struct LoadedVersion {
    var meta: MetaPage
    var rejectedMeta: String?
    /// The meta page's free list, and the pages that hold it.
    var free: [PageID]
    var freeListPages: [PageID]
    /// The changes the log holds after the checkpoint, and the version they reach.
    var active: Memtable
    var version: UInt64
    var replayed: Int
    var logReport: WALRecoveryReport
    var extent: LogExtent

    init(meta: MetaPage, rejectedMeta: String?, pageFile: PageFile, changes: ReplayedChanges, replayed: Int,
         logReport: WALRecoveryReport, extent: LogExtent) throws {
        self.meta = meta
        self.rejectedMeta = rejectedMeta
        (free, freeListPages) = try StorageEngine.readFreeList(meta, pageFile: pageFile)
        active = changes.linkLatest()
        version = max(meta.checkpointVersion, logReport.lastLSN.rawValue)
        self.replayed = replayed
        self.logReport = logReport
        self.extent = extent
    }
}

/// The durable layout of the data file, owned by checkpoints.
struct CheckpointState {
    var meta: MetaPage
    /// Pages free in the durable meta page that no snapshot can reach.
    var reusable: [PageID]
    /// Pages freed by checkpoint `generation` (parts of older trees): reusable once no
    /// snapshot pins a tree older than that generation.
    var pending: [(generation: UInt64, pages: [PageID])] = []
    /// Pages that hold the durable free list.
    var freeListPages: [PageID]
    /// Whether a checkpoint ran since the last vacuum (or the open): a close then vacuums,
    /// whether or not it checkpoints itself.
    var vacuumDue = false
}

extension StorageEngine {
    static let dataFileName = "data"
    static let logDirectoryName = "wal"
    static let lockFileName = "LOCK"
    /// Marks a directory a copy is being written into (FORMAT.md, "Copies").
    static let incompleteMarkerName = "INCOMPLETE"

    /// Opens the store in directory `path`, recovers it, and returns it with a report.
    /// `.readWrite` (the default) creates the store when it does not exist and takes it
    /// for this opener alone; `.readOnly` creates and changes nothing in the store but its
    /// reader table, replays the log in memory, and may be open any number of times at
    /// once, in any process, beside one writer (see `AccessMode.readOnly`).
    /// Throws `EngineError`: `.inUse` naming the holder (a writer's process ID, or
    /// read-only openers) when another opener has it, `.notAStore` for a read-only open
    /// of a directory without a store, `.noValidMetaPage` / `.corruptPage` /
    /// `.unsupportedVersion` for a damaged or newer data file, `.log` for a damaged log.
    public static func open(path: String, mode: AccessMode = .readWrite, fileSystem: any FileSystem = POSIXFileSystem(),
                            options: EngineOptions = EngineOptions()) throws -> (engine: StorageEngine, report: RecoveryReport) {
        try options.validate()
        guard options.completingCopy || !fileSystem.fileExists(joinPath(path, incompleteMarkerName)) else {
            throw EngineError.incompleteCopy(path: path)
        }
        switch mode {
        case .readWrite:
            let locks = try lockForWriting(path, fileSystem: fileSystem, options: options)
            return try openLocked(path: path, mode: mode, fileSystem: fileSystem, options: options, locks: locks, table: nil)
        case .readOnly:
            try checkIsStore(path, fileSystem: fileSystem)
            let table: ReaderTable
            do {
                table = try ReaderTable.open(directory: path, fileSystem: fileSystem)
            } catch let error as FileIOError {
                switch error {
                case .permissionDenied, .readOnlyFileSystem:
                    // A store this opener may not write beside (read-only media, another
                    // user's files): read it the way that needs no reader table, alone with
                    // other such readers and no writer.
                    let locks = try lockForReading(path, fileSystem: fileSystem)
                    return try openLocked(path: path, mode: mode, fileSystem: fileSystem, options: options, locks: locks,
                                          table: nil)
                default: throw EngineError.io(error)
                }
            }
            return try openLocked(path: path, mode: mode, fileSystem: fileSystem, options: options, locks: [], table: table)
        }
    }

    /// Opens a store whose locks are taken: a writer's, a reader's without a reader table
    /// (`table` nil), or a reader's with its table.
    private static func openLocked(path: String, mode: AccessMode, fileSystem: any FileSystem, options: EngineOptions,
                                   locks: [any FileLock], table: ReaderTable?) throws -> (engine: StorageEngine, report: RecoveryReport) {
        let dataPath = joinPath(path, dataFileName)
        let file: any OpenFile
        do {
            file = try fileSystem.open(dataPath, options: mode == .readWrite ? [.write] : [])
        } catch let error as FileIOError {
            for lock in locks { lock.unlock() }
            throw EngineError.io(error)
        }
        // Why the newer meta page was passed over, for an error the older one then leads to.
        var rejectedMeta: String?
        do {
            let slot = try table.map { try $0.claimSlot() }
            let (firstMeta, _) = try readMeta(file, path: dataPath)
            let pageFile = try PageFile(path: dataPath, file: file, pageBytes: firstMeta.pageBytes,
                                        cachePages: options.cacheBytes / firstMeta.pageBytes, maps: options.mapsDataFile)
            var loaded: LoadedVersion
            let logAccess: LogAccess
            var readerTable = table
            if let table, let slot {
                loaded = try loadBesideWriter(path: path, fileSystem: fileSystem, options: options, pageFile: pageFile,
                                              table: table, slot: slot, olderPins: nil)
                logAccess = .reader(Locked(loaded.extent))
            } else {
                let (meta, rejected) = try readMeta(file, path: dataPath)
                rejectedMeta = rejected
                if mode == .readWrite {
                    readerTable = try ReaderTable.open(directory: path, fileSystem: fileSystem)
                    let changes = ReplayedChanges(budgetBytes: options.checkpointMemtableBytes)
                    var replayed = 0
                    let (log, logReport) = try WriteAheadLog.open(
                        directory: joinPath(path, logDirectoryName), fileSystem: fileSystem,
                        options: logOptions(options, checkpointVersion: meta.checkpointVersion)
                    ) { record in
                        guard record.lsn.rawValue > meta.checkpointVersion else { return }
                        changes.append(record, version: record.lsn.rawValue)
                        replayed += 1
                    }
                    logAccess = .writer(log, DurabilityWaiter(log: log))
                    do {
                        loaded = try LoadedVersion(meta: meta, rejectedMeta: rejected, pageFile: pageFile, changes: changes,
                                                   replayed: replayed, logReport: logReport, extent: log.extent())
                        // A skip-corrupted open may have stepped over damaged batches at the
                        // log's end: the log goes on after their LSNs, and so do versions
                        // (each commit's version is the LSN the log gives it).
                        loaded.version = max(loaded.version, log.nextLSN.rawValue - 1)
                    } catch {
                        try? log.close()
                        throw error
                    }
                } else {
                    loaded = try readLog(path: path, fileSystem: fileSystem, options: options, meta: meta, rejectedMeta: rejected,
                                         pageFile: pageFile, through: nil)
                    logAccess = .reader(Locked(loaded.extent))
                }
            }
            let meta = loaded.meta
            let state = EngineState(version: loaded.version, tree: BTree(root: meta.root, height: Int(meta.height)),
                                    treeGeneration: meta.generation, treeVersion: meta.checkpointVersion, frozen: nil,
                                    active: loaded.active)
            var checkpoint = CheckpointState(meta: meta, reusable: loaded.free, freeListPages: loaded.freeListPages)
            if mode == .readWrite, let readerTable,
               readerTable.liveReaders().contains(where: { $0.generation < meta.generation }) {
                // A reader (of a process that outlived the last writer) still reads an older
                // tree, whose pages this free list may name: none is reused until it moves on.
                checkpoint.reusable = []
                checkpoint.pending = [(meta.generation, loaded.free)]
            }
            let engine = StorageEngine(path: path, options: options, fileSystem: fileSystem, pageFile: pageFile,
                                       logAccess: logAccess, locks: locks, state: state, checkpoint: checkpoint,
                                       readerTable: readerTable, readerSlot: slot)
            if mode == .readWrite, let readerTable {
                try readerTable.attachWriter(version: loaded.version, generation: meta.generation)
            }
            let report = RecoveryReport(checkpointVersion: meta.checkpointVersion, lastDurableVersion: loaded.version,
                                        metaGeneration: meta.generation, rejectedMeta: loaded.rejectedMeta, log: loaded.logReport,
                                        batchesReplayed: loaded.replayed)
            options.logger.info("opened store", metadata: [
                "path": "\(path)", "mode": "\(mode)", "checkpoint_version": "\(meta.checkpointVersion)", "version": "\(loaded.version)",
                "batches_replayed": "\(loaded.replayed)", "log_segments": "\(loaded.logReport.segmentCount)",
            ])
            for damage in loaded.logReport.damage {
                options.logger.warning("recovery cut the log", metadata: ["path": "\(path)", "damage": "\(damage)"])
            }
            if let rejected = loaded.rejectedMeta {
                options.logger.warning("a meta page was rejected; the other one was used",
                                     metadata: ["path": "\(path)", "reason": "\(rejected)"])
            }
            return (engine, report)
        } catch {
            try? file.close()
            for lock in locks { lock.unlock() }
            throw mapOpenError(error, rejectedMeta: rejectedMeta)
        }
    }

    /// The log options that replay the batches after `checkpointVersion`.
    static func logOptions(_ options: EngineOptions, checkpointVersion: UInt64) -> WALOptions {
        var logOptions = options.log
        logOptions.durability = options.durability
        logOptions.logger = options.logger
        logOptions.firstLSN = LSN(checkpointVersion + 1)
        logOptions.requiredFirstLSN = LSN(checkpointVersion + 1)
        logOptions.replayFrom = LSN(checkpointVersion + 1)
        return logOptions
    }

    /// Reads, without changing anything, the log after `meta`'s checkpoint (through the
    /// batch `through` when given) into a new memtable, with `meta`'s free list.
    /// `followsWriter`: for a reader beside a live writer, whose memtable grows with the
    /// writer's batches (it takes a hash index twice the writer's memtable budget, for the
    /// writer's frozen memtable and its active one).
    static func readLog(path: String, fileSystem: any FileSystem, options: EngineOptions, meta: MetaPage, rejectedMeta: String?,
                        pageFile: PageFile, through: UInt64?, followsWriter: Bool = false) throws -> LoadedVersion {
        // Replayed changes are made into nodes as they are read, sorted once and linked as
        // one sorted run (O(1) per key), the last change of each key only (ReplayedChanges.swift).
        let changes = ReplayedChanges(budgetBytes: (followsWriter ? 2 : 1) * options.checkpointMemtableBytes,
                                      followsWriter: followsWriter)
        var replayed = 0
        let (logReport, extent) = try WriteAheadLog.readForReplay(
            directory: joinPath(path, logDirectoryName), fileSystem: fileSystem,
            options: logOptions(options, checkpointVersion: meta.checkpointVersion), through: through.map { LSN($0) },
            skippingSegmentsBefore: LSN(meta.checkpointVersion + 1)
        ) { record in
            guard record.lsn.rawValue > meta.checkpointVersion else { return }
            changes.append(record, version: record.lsn.rawValue)
            replayed += 1
        }
        return try LoadedVersion(meta: meta, rejectedMeta: rejectedMeta, pageFile: pageFile, changes: changes, replayed: replayed,
                                 logReport: logReport, extent: extent)
    }

    /// Reads the newest version of a store whose writer may be running in another process,
    /// pinned in the reader's `slot` (ReaderTable.swift gives the protocol): the newest
    /// valid meta page, checked again once pinned, its tree's free list and the log after
    /// it through the version the writer last made durable. `olderPins` is the oldest tree
    /// generation this reader's snapshots still read (nil for none). Leaves the slot
    /// pinning the tree read (or `olderPins`) and no log.
    static func loadBesideWriter(path: String, fileSystem: any FileSystem, options: EngineOptions, pageFile: PageFile,
                                 table: ReaderTable, slot: ReaderSlot, olderPins: UInt64?) throws -> LoadedVersion {
        let attempts = 50
        for attempt in 1...attempts {
            let pinned = try table.pinning { () throws -> (MetaPage, String?)? in
                let (meta, rejected) = try readMeta(pageFile.file, path: pageFile.path)
                slot.pin(generation: min(olderPins ?? .max, meta.generation), logFrom: meta.checkpointVersion + 1)
                // A newer meta page written meanwhile may be one whose checkpoint did not see
                // this pin: start over from it (ReaderTable.T1).
                return try readMeta(pageFile.file, path: pageFile.path).0.generation == meta.generation ? (meta, rejected) : nil
            }
            guard let (meta, rejected) = pinned else { continue }
            try pageFile.followWriter()
            let through = table.writerIsLive ? table.writerVersion : nil
            do {
                let loaded = try readLog(path: path, fileSystem: fileSystem, options: options, meta: meta,
                                         rejectedMeta: rejected, pageFile: pageFile, through: through, followsWriter: true)
                slot.pin(logFrom: ReaderTable.none, version: loaded.version)
                return loaded
            } catch let error as WALError where attempt < attempts && table.writerIsLive {
                // A writer running (or one that started and recovered the log while it was
                // read) may have released or cut what was read: read again. Without one, the
                // log is as damaged as it reads.
                options.logger.debug("reading the log beside its writer failed; reading again",
                                     metadata: ["path": "\(path)", "error": "\(error)"])
                Thread.sleep(forTimeInterval: 0.001 * Double(attempt))
            }
        }
        throw EngineError.inUse(path: path, holder: "its writer kept replacing the version this reader was opening "
            + "(\(attempts) attempts); retry")
    }

    /// A readable error for a failed open.
    private static func mapOpenError(_ error: any Error, rejectedMeta: String?) -> any Error {
        switch error {
        case let WALError.missingData(path, reason):
            // The older meta page's checkpoint needs batches a later checkpoint released.
            return EngineError.missingData(path: path, reason: rejectedMeta.map {
                "\(reason); the newer meta page was rejected (\($0)) and the older checkpoint's later batches "
                    + "are no longer in the log"
            } ?? reason)
        case let error as WALError: return EngineError.log(error)
        case let error as FileIOError: return EngineError.io(error)
        default: return error
        }
    }

    /// Throws `.notAStore` (or `.missingData` for a log without its data file) when
    /// `path` holds no store; creates nothing.
    private static func checkIsStore(_ path: String, fileSystem: any FileSystem) throws {
        let dataPath = joinPath(path, dataFileName)
        guard !fileSystem.fileExists(dataPath) else { return }
        let logPath = joinPath(path, logDirectoryName)
        if (try? WriteAheadLog.holdsSegments(directory: logPath, fileSystem: fileSystem)) == true {
            throw EngineError.missingData(path: dataPath, reason:
                "the data file is missing while \(logPath) holds a log that continues it")
        }
        throw EngineError.notAStore(path: path)
    }

    /// Takes the store for one writer: the exclusive lock on `LOCK` (which then holds
    /// this process's ID, for the messages of openers refused meanwhile), the data file
    /// (created when the store is new), and an exclusive lock on the data file, which
    /// keeps read-only openers out while this writer may rewrite pages.
    private static func lockForWriting(_ path: String, fileSystem: any FileSystem,
                                       options: EngineOptions) throws -> [any FileLock] {
        let lockPath = joinPath(path, lockFileName)
        let dataPath = joinPath(path, dataFileName)
        let storeLock: any FileLock
        do {
            try fileSystem.createDirectoryDurably(path)
            storeLock = try fileSystem.lockExclusively(lockPath)
        } catch FileIOError.locked {
            throw EngineError.inUse(path: path, holder: writerDescription(path, fileSystem: fileSystem))
        } catch let error as FileIOError {
            throw EngineError.io(error)
        }
        do {
            let handle = try fileSystem.open(lockPath, options: [.write, .truncate])
            defer { try? handle.close() }
            try handle.write(Array("\(ProcessInfo.processInfo.processIdentifier)\n".utf8), at: 0)
            if !fileSystem.fileExists(dataPath) {
                // A log without its data file has lost the versions the data file held:
                // refuse rather than start an empty data file under it.
                let logPath = joinPath(path, logDirectoryName)
                if try WriteAheadLog.holdsSegments(directory: logPath, fileSystem: fileSystem) {
                    throw EngineError.missingData(path: dataPath, reason:
                        "the data file is missing while \(logPath) holds a log that continues it")
                }
                try createDataFile(dataPath, in: path, fileSystem: fileSystem, options: options)
            }
            do {
                return [storeLock, try fileSystem.lockExclusively(dataPath)]
            } catch FileIOError.locked {
                throw EngineError.inUse(path: path, holder:
                    "it is open read-only elsewhere (a `strata get`, `scan`, `dump`, `stat`, `verify` or a read-only "
                        + "store); retry once those readers have closed it")
            }
        } catch {
            storeLock.unlock()
            if let error = error as? FileIOError { throw EngineError.io(error) }
            throw error
        }
    }

    /// Takes a shared lock on the data file: any number of read-only openers at once, none
    /// beside a writer. Creates nothing.
    private static func lockForReading(_ path: String, fileSystem: any FileSystem) throws -> [any FileLock] {
        let dataPath = joinPath(path, dataFileName)
        do {
            return [try fileSystem.lockShared(dataPath)]
        } catch FileIOError.locked {
            throw EngineError.inUse(path: path, holder: writerDescription(path, fileSystem: fileSystem))
        } catch FileIOError.notFound {
            let logPath = joinPath(path, logDirectoryName)
            if (try? WriteAheadLog.holdsSegments(directory: logPath, fileSystem: fileSystem)) == true {
                throw EngineError.missingData(path: dataPath, reason:
                    "the data file is missing while \(logPath) holds a log that continues it")
            }
            throw EngineError.notAStore(path: path)
        } catch let error as FileIOError {
            throw EngineError.io(error)
        }
    }

    /// Who holds the store for writing, from the process ID its writer left in `LOCK`.
    private static func writerDescription(_ path: String, fileSystem: any FileSystem) -> String {
        let recorded = try? { () throws -> [UInt8] in
            let handle = try fileSystem.open(joinPath(path, lockFileName), options: [])
            defer { try? handle.close() }
            return try handle.read(count: 16, at: 0)
        }()
        let text = recorded.map { String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) }
        let holder = text.flatMap { Int32($0) }.map { "process \($0)" } ?? "another process"
        return "\(holder) has it open for writing; run the command there (in its shell or through its API), "
            + "or close the store in that process and retry"
    }

    /// Writes a new data file whole under a temporary name, then renames it into place,
    /// so a crash leaves either no data file or a valid one.
    private static func createDataFile(_ dataPath: String, in directory: String, fileSystem: any FileSystem,
                                       options: EngineOptions) throws {
        let temporary = dataPath + ".tmp"
        let file = try fileSystem.open(temporary, options: [.create, .write, .truncate])
        let meta = MetaPage(pageBytes: options.pageBytes, generation: 0, root: .none, freeListHead: .none,
                            checkpointVersion: 0, pageCount: 2, keyCount: 0, height: 0)
        try file.write(meta.encoded(), at: 0)
        try file.write([UInt8](repeating: 0, count: options.pageBytes), at: Int64(options.pageBytes))
        try file.sync()
        try file.close()
        try fileSystem.rename(temporary, to: dataPath)
        try fileSystem.syncDirectory(directory)
    }

    /// The newest valid meta page, and why the other was rejected.
    static func readMeta(_ file: any OpenFile, path: String) throws -> (MetaPage, String?) {
        let head = try file.read(count: Limits.pageBytesRange.lowerBound, at: 0)
        var candidates: [(slot: Int, result: Result<MetaPage, MetaDefect>)] = []
        let declared = MetaPage.declaredPageBytes(head)
        for slot in 0..<2 {
            // Slot 1 starts one page in; if slot 0 cannot say the page size, try each.
            let sizes = declared.map { [$0] } ?? Limits.pageBytesRange.filter { $0 & ($0 - 1) == 0 && $0 % 4096 == 0 }
            var best: Result<MetaPage, MetaDefect>?
            var firstDefect: MetaDefect?
            for size in sizes {
                let bytes = try file.read(count: size, at: Int64(slot * size))
                guard bytes.count == size else { continue }
                let result = Result { () throws(MetaDefect) in try MetaPage.decode(bytes) }
                if case .success = result { best = result; break }
                if case .failure(.newerVersion) = result { best = result; break }
                // The reason at the first size tried (the declared one, when slot 0 says it)
                // is the one to report: "its checksum does not match" says more than "not a meta page".
                if case let .failure(defect) = result, firstDefect == nil { firstDefect = defect }
            }
            candidates.append((slot, best ?? .failure(firstDefect ?? .invalid("it is not a meta page"))))
        }
        // A meta page that verifies but comes from a newer format means a newer Strata
        // wrote this file: refuse it whole rather than read half of it.
        for candidate in candidates {
            if case let .failure(.newerVersion(found)) = candidate.result {
                throw EngineError.unsupportedVersion(path: path, found: found, supported: MetaPage.version)
            }
        }
        let valid = candidates.compactMap { try? $0.result.get() }
        if let newest = valid.max(by: { $0.generation < $1.generation }) {
            // Measured after the meta pages are read: a writer in another process grows the
            // file (its checkpoint's pages) before it writes the meta page that counts them,
            // so a size read first could miss pages a meta page read after it counts (a
            // reader opening beside a writer's first checkpoint took that for damage).
            let fileBytes = UInt64(max(0, try file.size()))
            // A checkpoint writes (and syncs) every page it counts before its meta page: a
            // file that ends inside them was cut short, or the meta page is forged (its new
            // pages would be written past the end: terabytes of a sparse file).
            guard newest.pageCount * UInt64(newest.pageBytes) <= fileBytes else {
                throw EngineError.corruptPage(path: path, offset: Int64(fileBytes), reason:
                    "the file ends inside the \(newest.pageCount) pages of \(newest.pageBytes) bytes its meta page counts "
                        + "(at \(fileBytes) bytes): it was cut short, or that meta page was not written by a checkpoint")
            }
            // A new data file has one meta page (generation 0) and a zeroed page 1 until
            // its first checkpoint: that page is not damage.
            if newest.generation == 0, let pageBytes = declared,
               try file.read(count: pageBytes, at: Int64(pageBytes)).allSatisfy({ $0 == 0 }) {
                return (newest, nil)
            }
            let rejected = candidates.compactMap { candidate -> String? in
                if case let .failure(defect) = candidate.result { return "meta page \(candidate.slot): \(defect)" }
                return nil
            }.first
            return (newest, rejected)
        }
        throw EngineError.noValidMetaPage(path: path, reasons: candidates.map { candidate in
            if case let .failure(defect) = candidate.result { return "meta page \(candidate.slot): \(defect)" }
            return ""
        })
    }

    /// The free pages the meta page lists, and the pages the list itself occupies.
    static func readFreeList(_ meta: MetaPage, pageFile: PageFile) throws -> ([PageID], [PageID]) {
        var free: [PageID] = []
        var listPages: [PageID] = []
        // Which list page named each free page, to report a duplicate where it is.
        var namedBy: [PageID] = []
        var seenListPages = Set<PageID>()
        var next = meta.freeListHead
        while next != .none {
            guard seenListPages.insert(next).inserted, next.rawValue < meta.pageCount else {
                throw corrupt(pageFile, next, "the free list loops or points past the end of the file")
            }
            listPages.append(next)
            let (bytes, _, count, word) = try pageFile.readPage(next, types: [.freeList])
            let ids: [PageID]
            do { ids = try PageCodec.decodeFreeList(bytes, count: count) } catch {
                throw corrupt(pageFile, next, error.description)
            }
            for id in ids {
                guard id >= .firstDataPage, id.rawValue < meta.pageCount else {
                    throw corrupt(pageFile, next, "the free list names \(id), out of range")
                }
                free.append(id)
                namedBy.append(next)
            }
            next = PageID(word)
        }
        // No page may be listed twice, nor be a page of the list itself: sorted, a repeat
        // sits next to its twin (a sort, not a hash set: opening a store with a long free
        // list spent most of its time hashing).
        var entries = free.indices.map { (id: free[$0], listPage: namedBy[$0]) }
        entries += listPages.map { (id: $0, listPage: $0) }
        entries.sort { $0.id < $1.id }
        for (previous, current) in zip(entries, entries.dropFirst()) where previous.id == current.id {
            throw corrupt(pageFile, current.listPage, "the free list names \(current.id) twice")
        }
        return (free, listPages)
    }
}
