// The write-ahead log: every durable commit is one batch appended here as one or more
// checksummed, LZ4-compressed frames (FORMAT.md, "Write-ahead log").
//
// Invariants (cited in the code):
//  WriteAheadLog.W1. LSNs are assigned in queue order, and frames reach the file in LSN order.
//  WriteAheadLog.W2. In `.full` mode `append` returns only after an fdatasync that covers its frames.
//  WriteAheadLog.W3. One group commit = one write (one per 256 KiB for a larger group, in order:
//      `GroupFrames`) and (in `.full` mode) one fdatasync, shared by every batch queued when the
//      group formed.
//  WriteAheadLog.W4. A group never spans segments; a segment is synced (sealed) before the next one is
//      started, so a later segment's existence proves every earlier frame durable.
//  WriteAheadLog.W5. Each frame records the highest LSN that was durable when it was written.
//  WriteAheadLog.W6. After a failed write or fdatasync nothing more is written: every waiter fails, and
//      so does every later call, until the log is reopened. An fdatasync is never retried.
// Thread-safety: every method may be called from any thread. The state below is touched
// only while `monitor` is held; file I/O runs outside it, by one leader at a time
// (`flushing`), and a release of old segments beside it (`releasing`). Callers block in
// `append` while their group is written and synced: call it from a thread of your own,
// not from Swift's cooperative pool.
import StrataFileIO
import StrataLocks

/// An open write-ahead log in one directory.
package final class WriteAheadLog: @unchecked Sendable {
    /// The directory holding the segments.
    package let directory: String
    /// The settings the log was opened with.
    package let options: WALOptions

    let files: SegmentFiles
    private let lock: any FileLock
    let monitor = ConditionLock()
    /// Touched only with `monitor` held, which makes each access exclusive: unchecked at
    /// run time (as `Locked`'s value).
    @exclusivity(unchecked) var state: WriterState
    /// Where the group commit's leader lays out its frames (only the leader touches it).
    let groupFrames = GroupFrames()

    /// Opens (creating if needed) the log in `directory`, recovers it, and passes every
    /// batch it holds to `replay` in LSN order before returning. Recovery cuts off a torn
    /// tail and syncs the tail segment and the directory, so what was replayed is durable.
    /// Throws `WALError` (corruption names its file and offset) or `FileIOError.locked`
    /// when another open log holds the directory.
    package static func open(directory: String, fileSystem: any FileSystem = POSIXFileSystem(),
                            options: WALOptions = WALOptions(),
                            replay: (WALRecord) throws -> Void = { _ in }) throws -> (WriteAheadLog, WALRecoveryReport) {
        try options.validate()
        let files = SegmentFiles(fileSystem: fileSystem, directory: directory)
        let lock: any FileLock
        do {
            try fileSystem.createDirectoryDurably(directory)
            lock = try fileSystem.lockExclusively(joinPath(directory, "wal.lock"))
        } catch let error as FileIOError {
            throw error.isLocked ? error : WALError.io(error)
        }
        var (report, tail) = try readChecked(WALReader(files: files, mode: options.recoveryMode, replayFrom: options.replayFrom ?? .none),
                                             options: options, replay: replay)
        do {
            var state = try Self.prepareTail(&tail, files: files, options: options, report: &report)
            state.keepsHistory = try Self.prepareHistory(files: files, options: options.history)
            return (WriteAheadLog(directory: directory, options: options, files: files, lock: lock, state: state), report)
        } catch let error as FileIOError {
            throw WALError.io(error)
        }
    }

    /// Reads the log in `directory` as `open` would recover it, passing every batch to
    /// `replay`, but changes nothing: no lock, no file written, a torn tail left in place
    /// (its bytes past the last whole frame are ignored, as recovery would cut them). For
    /// a read-only store, which keeps writers out while it is open. Returns what was read
    /// and the extent of the log's valid frames. Throws as `open` does.
    package static func readForReplay(directory: String, fileSystem: any FileSystem = POSIXFileSystem(),
                                     options: WALOptions = WALOptions(), through readThrough: LSN? = nil,
                                     skippingSegmentsBefore skipBefore: LSN? = nil, resumingAt resume: LogPosition? = nil,
                                     replay: (WALRecord) throws -> Void) throws -> (WALRecoveryReport, LogExtent) {
        try options.validate()
        guard fileSystem.fileExists(directory) else {
            // A store that crashed before its log directory was made: an empty log.
            return (WALRecoveryReport(), LogExtent(segmentPaths: [], activeBytes: 0, lastLSN: LSN(options.firstLSN.rawValue - 1),
                                                  oldestLSN: options.firstLSN))
        }
        let files = SegmentFiles(fileSystem: fileSystem, directory: directory)
        var reader = WALReader(files: files, mode: options.recoveryMode, replayFrom: options.replayFrom ?? .none)
        reader.readThrough = readThrough
        reader.skipSegmentsBefore = skipBefore
        reader.resumeAt = resume
        let (report, tail) = try readChecked(reader, options: options, replay: replay)
        let nextLSN = tail.segments.isEmpty ? max(tail.nextLSN, options.firstLSN) : tail.nextLSN
        let extent = LogExtent(segmentPaths: tail.segments.map(\.path), activeBytes: tail.segments.isEmpty ? 0 : tail.offset,
                               lastLSN: LSN(nextLSN.rawValue - 1), oldestLSN: tail.segments.first?.firstLSN ?? nextLSN)
        return (report, extent)
    }

    /// Reads every segment and checks that the log starts where `options` requires.
    private static func readChecked(_ reader: WALReader, options: WALOptions,
                                    replay: (WALRecord) throws -> Void) throws -> (WALRecoveryReport, WALTail) {
        let (report, tail) = try reader.read(replay)
        if let required = options.requiredFirstLSN, let first = tail.segments.first, first.firstLSN > required {
            throw WALError.missingData(path: first.path, reason:
                "the log starts at \(first.firstLSN) but must hold every batch from \(required) on; "
                    + "batches \(required.rawValue) to \(first.firstLSN.rawValue - 1) are missing")
        }
        return (report, tail)
    }

    /// Whether `directory` holds any segment of a log (nothing is read or changed).
    package static func holdsSegments(directory: String, fileSystem: any FileSystem) throws -> Bool {
        guard fileSystem.fileExists(directory) else { return false }
        return try !SegmentFiles(fileSystem: fileSystem, directory: directory).list().segments.isEmpty
    }

    /// Reads the log in `directory` without changing anything: every batch goes to `visit`.
    package static func read(directory: String, fileSystem: any FileSystem = POSIXFileSystem(),
                            mode: RecoveryMode = .strict, visit: (WALRecord) throws -> Void) throws -> WALRecoveryReport {
        let files = SegmentFiles(fileSystem: fileSystem, directory: directory)
        return try WALReader(files: files, mode: mode).read(visit).0
    }

    /// Whether the log keeps history from now on: `retention` on, and either from the start
    /// or once a change feed made the history directory. A history left by earlier opens
    /// with retention now off is removed: kept no longer, it would leave a gap.
    private static func prepareHistory(files: SegmentFiles, options retention: HistoryRetention) throws -> Bool {
        let history = files.history
        let exists = files.fileSystem.fileExists(history.directory)
        guard retention.isEnabled else {
            guard exists else { return false }
            for segment in try history.list().segments { try files.fileSystem.removeFile(segment.path) }
            try files.fileSystem.syncDirectory(history.directory)
            return false
        }
        guard exists || retention.start == .immediately else { return false }
        if !exists { try files.fileSystem.createDirectoryDurably(history.directory) }
        return true
    }

    /// Starts keeping history (`HistoryRetention.Start.onFirstChangeFeed`): makes the
    /// history directory, whose existence makes later opens keep it too. Does nothing when
    /// retention is off or history is kept already.
    package func startKeepingHistory() throws {
        guard options.history.isEnabled else { return }
        monitor.lock()
        let keeps = state.keepsHistory
        monitor.unlock()
        guard !keeps else { return }
        do { try files.fileSystem.createDirectoryDurably(files.history.directory) } catch let error as FileIOError {
            throw WALError.io(error)
        }
        monitor.lock()
        state.keepsHistory = true
        monitor.unlock()
    }

    /// The first LSN of the history kept beside the log in `directory` (nil: none is kept).
    package static func oldestHistoryLSN(directory: String, fileSystem: any FileSystem) throws -> LSN? {
        try SegmentFiles(fileSystem: fileSystem, directory: directory).history.historySegments().first?.firstLSN
    }

    /// Reads the history kept beside the log in `directory` (FORMAT.md, "History") from the
    /// segment that holds `from` on, without changing anything: every batch from `from` on
    /// goes to `visit`; earlier segments are not opened.
    /// Returns the LSN after the last batch it read (nil: no history is kept).
    @discardableResult
    package static func readHistory(directory: String, fileSystem: any FileSystem, from: LSN,
                                    visit: (WALRecord) throws -> Void) throws -> LSN? {
        var history = SegmentFiles(fileSystem: fileSystem, directory: directory).history
        let segments = try history.historySegments()
        guard let start = segments.lastIndex(where: { $0.firstLSN <= from }) ?? segments.indices.first else { return nil }
        history.firstSequence = segments[start].sequence
        var reader = WALReader(files: history, mode: .strict)
        reader.replayFrom = from
        return try reader.read(visit).1.nextLSN
    }

    private init(directory: String, options: WALOptions, files: SegmentFiles, lock: any FileLock, state: WriterState) {
        self.directory = directory
        self.options = options
        self.files = files
        self.lock = lock
        self.state = state
    }

    deinit {
        try? state.active.handle.close()
        lock.unlock()
    }

    /// Applies what recovery found: removes leftovers, starts a new segment when the tail
    /// must not be appended to, and syncs the tail segment and the directory.
    private static func prepareTail(_ tail: inout WALTail, files: SegmentFiles, options: WALOptions,
                                    report: inout WALRecoveryReport) throws -> WriterState {
        let fileSystem = files.fileSystem
        for path in tail.temporaries + tail.discardedSegments {
            try fileSystem.removeFile(path)
            report.discardedFiles.append(path)
        }
        tail.segments.removeAll { segment in tail.discardedSegments.contains(segment.path) }
        if tail.segments.isEmpty { tail.nextLSN = max(tail.nextLSN, options.firstLSN) }
        var statistics = WALStatistics()
        statistics.syncCount += try rewriteUnproven(tail.unproven.filter { !tail.discardedSegments.contains($0.path) },
                                                    fileSystem: fileSystem)
        let active: ActiveSegment
        if tail.needsNewSegment {
            // Sync what was recovered first (WriteAheadLog.W4): the new segment must not outlive it.
            if let last = tail.segments.last {
                let handle = try fileSystem.open(last.path, options: [.write])
                try handle.syncData()
                try handle.close()
                statistics.syncCount += 1
            }
            let sequence = (tail.segments.last?.sequence ?? 0) + 1
            let spare = tail.spares.popLast()
            active = try ActiveSegment.start(sequence: sequence, firstLSN: tail.nextLSN, previousBytes: 0, minimumBytes: 0,
                                             files: files, options: options, reusing: spare)
            tail.segments.append((sequence, active.path, tail.nextLSN))
            statistics.segmentsStarted += 1
        } else {
            let last = tail.segments.last!
            let handle = try fileSystem.open(last.path, options: [.write])
            try handle.syncData()
            statistics.syncCount += 1
            active = ActiveSegment(handle: handle, sequence: last.sequence, path: last.path, salt: tail.salt,
                                   offset: tail.offset, capacity: Int(try handle.size()), written: tail.offset)
        }
        try fileSystem.syncDirectory(files.directory)
        let recovered = LSN(tail.nextLSN.rawValue - 1)
        return WriterState(nextLSN: tail.nextLSN, writtenLSN: recovered, durableLSN: recovered, active: active,
                           segments: tail.segments.map { Segment(sequence: $0.sequence, path: $0.path, firstLSN: $0.firstLSN) },
                           spares: tail.spares, statistics: statistics)
    }

    /// Writes the frames no durable LSN vouches for again, in place, and syncs them. After a
    /// failed fdatasync the kernel may have dropped their pages' dirty state, so reading
    /// them back (from the page cache) and syncing again proves nothing; only a new write
    /// and its sync do. The first group appended after this open records them as durable,
    /// so they must be. Normally these are the last group's frames only. Returns the syncs.
    private static func rewriteUnproven(_ frames: [FrameExtent], fileSystem: any FileSystem) throws -> Int {
        var syncs = 0
        var byPath: [String: Range<Int>] = [:]
        for frame in frames {
            let range = byPath[frame.path] ?? frame.offset..<frame.end
            byPath[frame.path] = min(range.lowerBound, frame.offset)..<max(range.upperBound, frame.end)
        }
        for (path, range) in byPath.sorted(by: { $0.key < $1.key }) {
            let handle = try fileSystem.open(path, options: [.write])
            defer { try? handle.close() }
            let bytes = try handle.read(count: range.count, at: Int64(range.lowerBound))
            guard bytes.count == range.count else {
                throw FileIOError.ioError(operation: .read, path: path)
            }
            try handle.write(bytes, at: Int64(range.lowerBound))
            try handle.syncData()
            syncs += 1
        }
        return syncs
    }

    /// The first LSN the log's oldest segment may hold: batches from here on are in the log
    /// (those before it were released by checkpoints).
    package var oldestLSN: LSN { monitor.lock(); defer { monitor.unlock() }; return state.segments.first?.firstLSN ?? state.nextLSN }

    /// The log's files as they stand between group commits: every segment's path, how
    /// many bytes of the last one hold frames, and the last LSN written. Bytes below that
    /// extent never change again while the segments are kept (frames are only appended), so
    /// a copy of them is a consistent log. Waits for a running group commit to finish.
    package func extent() -> LogExtent {
        monitor.lock()
        defer { monitor.unlock() }
        while state.flushing || state.releasing { monitor.wait() }
        return LogExtent(segmentPaths: state.segments.map(\.path), activeBytes: state.active.offset, lastLSN: state.writtenLSN,
                         oldestLSN: state.segments.first?.firstLSN ?? state.nextLSN)
    }

    /// The LSN of the last batch on stable storage.
    package var durableLSN: LSN { monitor.lock(); defer { monitor.unlock() }; return state.durableLSN }

    /// The LSN of the last batch written (equal to `durableLSN` in `.full` mode when idle).
    package var writtenLSN: LSN { monitor.lock(); defer { monitor.unlock() }; return state.writtenLSN }

    /// Counters of the log's work since it was opened.
    package var statistics: WALStatistics { monitor.lock(); defer { monitor.unlock() }; return state.statistics }

    /// The segment files of the log, oldest first.
    package var segmentPaths: [String] { monitor.lock(); defer { monitor.unlock() }; return state.segments.map(\.path) }

    /// The failure that stopped the log, if one did (WriteAheadLog.W6).
    package var failure: FileIOError? { monitor.lock(); defer { monitor.unlock() }; return state.failure }

    /// Waits for the group in flight, syncs what `.relaxed` mode wrote, and closes the log.
    /// Later calls throw `WALError.closed`. Closing a failed log closes it without syncing.
    package func close() throws {
        monitor.lock()
        defer { monitor.unlock() }
        while state.flushing || state.releasing { monitor.wait() }
        guard !state.closed else { return }
        state.closed = true
        defer {
            try? state.active.handle.close()
            lock.unlock()
            wakeWaiters()
        }
        if state.failure == nil && state.writtenLSN > state.durableLSN {
            do { try state.active.handle.syncData() } catch let error as FileIOError { throw WALError.io(error) }
            state.durableLSN = state.writtenLSN
            state.statistics.syncCount += 1
        }
    }
}

/// A log's files as they stand between group commits (`WriteAheadLog.extent()`) or as a
/// read-only reader found them (`WriteAheadLog.readForReplay`).
package struct LogExtent: Sendable {
    /// The segment files, oldest first.
    package var segmentPaths: [String]
    /// How many bytes of the last segment hold whole frames (0 when there is no segment).
    package var activeBytes: Int
    /// The last LSN written.
    package var lastLSN: LSN
    /// The first LSN the oldest segment may hold.
    package var oldestLSN: LSN

    /// Where a later read may go on: after the last whole frame of the last segment.
    package var end: LogPosition? {
        segmentPaths.last.map { LogPosition(path: $0, offset: activeBytes, lsn: LSN(lastLSN.rawValue + 1)) }
    }
}

extension FileIOError {
    var isLocked: Bool { if case .locked = self { true } else { false } }
}
