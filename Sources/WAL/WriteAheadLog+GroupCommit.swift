// Appending with group commit: the first waiting appender becomes the leader, takes every
// batch queued so far, writes their frames (with one write unless the group is larger
// than 256 KiB) and syncs them with one fdatasync (WriteAheadLog.W3), then hands the lead
// to the next waiter. Also `sync()` for `.relaxed` mode and `releaseSegments(through:)`
// for checkpoints.
import StrataCodec
import StrataFileIO
import StrataLocks

extension WriteAheadLog {
    /// Appends `batch` as the next LSN and returns that LSN once the batch is durable
    /// (`.full`) or written (`.relaxed`). Blocks the calling thread meanwhile.
    /// Throws `WALError.batchTooLarge` (nothing written), `.commitOutcomeUnknown` (the
    /// write or fdatasync of its group failed), `.logFailed` or `.closed`.
    @discardableResult
    package func append(_ batch: WALBatch) throws -> LSN {
        let lsn = try submit(batch)
        try waitUntilDone(lsn)
        return lsn
    }

    /// Queues `batch` for the next group commit and returns its LSN at once, without
    /// waiting: LSNs are assigned in the order `submit` is called (WriteAheadLog.W1), so a caller that
    /// holds its own lock across `submit` orders its commits by it. Follow with
    /// `waitUntilDone(_:)`. Encoding and compression run on the calling thread.
    package func submit(_ batch: WALBatch) throws -> LSN {
        try enqueue(batch).lsn
    }

    /// `submit(_:)`, also returning the batch's encoded and stored (compressed) sizes.
    package func enqueue(_ batch: WALBatch) throws -> Submission {
        try enqueue(batch, measure: batch.measure)
    }

    /// `enqueue(_:)` for a caller that has the batch's `measure` already. A batch larger
    /// than one frame is encoded a fragment at a time, never laid out whole
    /// (`WALBatch.EncodingStream`).
    package func enqueue(_ batch: WALBatch, measure: WALBatch.Measure) throws -> Submission {
        try enqueue(EncodedBatch(batch, measure: measure, compression: options.compression))
    }

    /// `enqueue(_:)` of a batch encoded already (`WALBatch.encoding()`), for a caller that
    /// also links the batch from its encoding.
    package func enqueue(_ encoding: WALBatch.Encoding) throws -> Submission {
        try enqueue(EncodedBatch(encoding, compression: options.compression))
    }

    private func enqueue(_ encoded: EncodedBatch) throws -> Submission {
        monitor.lock()
        defer { monitor.unlock() }
        guard !state.closed else { throw WALError.closed }
        if let failure = state.failure { throw WALError.logFailed(cause: failure) }
        let lsn = state.nextLSN
        state.nextLSN = lsn.next
        state.queue.append(PendingBatch(lsn: lsn, encoded: encoded))
        state.statistics.appendCount += 1
        return Submission(lsn: lsn, rawByteCount: encoded.batchBytes, storedByteCount: encoded.storedBytes)
    }

    /// The LSN the next `enqueue` will take. A caller that holds its own lock across this
    /// and its `enqueue` (the engine's commit lock) knows its batch's LSN before encoding it.
    package var nextLSN: LSN {
        monitor.lock()
        defer { monitor.unlock() }
        return state.nextLSN
    }

    /// Waits until the batch at `lsn` is durable (`.full`) or written (`.relaxed`), leading
    /// group commits while no one else does. Returns how many batches shared the group
    /// commit that wrote `lsn` (0 when that group is long forgotten: more than
    /// `WriterState.recentGroupLimit` groups ago). Throws as `append` does.
    @discardableResult
    package func waitUntilDone(_ lsn: LSN) throws -> Int {
        monitor.lock()
        defer {
            // The sleepers a group commit made ready wake once the monitor is free, so
            // that none blocks at once on it.
            let wakes = takeWakes()
            monitor.unlock()
            for sleeper in wakes { sleeper.wake() }
        }
        guard lsn < state.nextLSN else { throw WALError.notSubmitted(lsn) }
        while true {
            let done = options.durability == .full ? state.durableLSN >= lsn : state.writtenLSN >= lsn
            if done { return state.groupSize(containing: lsn) }
            if let failure = state.failure {
                if let unknown = state.unknownOutcome, unknown.contains(lsn.rawValue) {
                    throw WALError.commitOutcomeUnknown(lsn: lsn, cause: failure)
                }
                throw WALError.logFailed(cause: failure)
            }
            if state.closed { throw WALError.closed }
            // Not flushing, the batch is queued: lead. Else it is in the group in flight
            // or queued behind it: sleep until its group is done or the queue needs a
            // leader. Alone: woken all at once for each group, the threads queued behind
            // it went back to sleep, and eight committers on two CPUs woke three times
            // as often as they had something to do.
            if !state.flushing && !state.queue.isEmpty {
                commitGroup()
                continue
            }
            // Those this thread's group made ready wake before it sleeps.
            for sleeper in takeWakes() { sleeper.wake() }
            let sleeper = Sleeper()
            state.sleepers.append((lsn, sleeper))
            monitor.wait(sleeper)
            state.sleepers.removeAll { $0.sleeper === sleeper }
        }
    }

    /// Wakes whoever can go on now (call with the monitor held, after changing the state):
    /// every thread in `sync`, `shrink`, `extent` or `close` waiting for the log to be idle,
    /// and of the sleepers in `waitUntilDone` those whose batch is done (all of them once
    /// the log failed or closed) and, when batches are queued and no group is in flight,
    /// the one waiting for the oldest of them, to lead. With `afterUnlock`, the sleepers
    /// are left in `state.wakes` for the caller to wake once it released the monitor.
    func wakeWaiters(afterUnlock: Bool = false) {
        monitor.broadcast()
        guard !state.sleepers.isEmpty else { return }
        let done = options.durability == .full ? state.durableLSN : state.writtenLSN
        let everyone = state.failure != nil || state.closed
        let leads = !everyone && !state.flushing && !state.queue.isEmpty
        var leader: (lsn: LSN, sleeper: Sleeper)?
        var index = 0
        while index < state.sleepers.count {
            let entry = state.sleepers[index]
            if everyone || entry.lsn <= done {
                state.wakes.append(entry.sleeper)
                state.sleepers.remove(at: index)
                continue
            }
            if leads && leader.map({ entry.lsn < $0.lsn }) ?? true { leader = entry }
            index += 1
        }
        if let leader { state.wakes.append(leader.sleeper) }
        guard !afterUnlock else { return }
        for sleeper in takeWakes() { sleeper.wake() }
    }

    /// The sleepers `wakeWaiters(afterUnlock: true)` left to be woken, taken off the state
    /// (call with the monitor held).
    func takeWakes() -> [Sleeper] {
        guard !state.wakes.isEmpty else { return [] }
        defer { state.wakes.removeAll(keepingCapacity: true) }
        return state.wakes
    }

    /// Makes every batch written so far durable (one fdatasync); a no-op when they are.
    /// In `.full` mode they always are. Throws `WALError`; a failure stops the log (WriteAheadLog.W6).
    package func sync() throws {
        monitor.lock()
        defer { monitor.unlock() }
        while state.flushing { monitor.wait() }
        guard !state.closed else { throw WALError.closed }
        if let failure = state.failure { throw WALError.logFailed(cause: failure) }
        guard state.writtenLSN > state.durableLSN else { return }
        let target = state.writtenLSN
        let handle = state.active.handle
        state.flushing = true
        monitor.unlock()
        let result = Result { try handle.syncData() }
        monitor.lock()
        state.flushing = false
        state.statistics.syncCount += 1
        defer { wakeWaiters() }
        switch result {
        case .success:
            state.durableLSN = target
        case .failure(let error):
            let cause = error as? FileIOError ?? .ioError(operation: .syncData, path: handle.path)
            options.logger.error("fdatasync of the log failed; commits through LSN \(target.rawValue) have an unknown outcome and the log stops",
                               metadata: ["path": "\(handle.path)", "error": "\(cause)"])
            state.failure = cause
            state.unknownOutcome = (state.durableLSN.rawValue + 1)...target.rawValue
            throw WALError.commitOutcomeUnknown(lsn: target, cause: cause)
        }
    }

    /// Releases the segments whose every batch has an LSN at or below `lsn` (a checkpoint
    /// holds them now): each is kept as a spare for reuse or removed, and the directory is
    /// synced. The segment being appended to is never released. Returns how many were.
    @discardableResult
    package func releaseSegments(through lsn: LSN) throws -> Int {
        monitor.lock()
        defer { monitor.unlock() }
        while state.flushing || state.releasing { monitor.wait() }
        guard !state.closed else { throw WALError.closed }
        var releasable: [Segment] = []
        for (index, segment) in state.segments.dropLast().enumerated()
        where state.segments[index + 1].firstLSN.rawValue - 1 <= lsn.rawValue {
            releasable.append(segment)
        }
        guard !releasable.isEmpty else { return 0 }
        state.releasing = true
        var spareCount = state.spares.count
        let nextLSN = state.nextLSN
        let keepsHistory = state.keepsHistory
        monitor.unlock()
        var released: [(Segment, String?)] = []
        let result = Result {
            for segment in releasable {
                // Kept as history, or reused or removed (WALOptions.history).
                if keepsHistory {
                    try files.moveToHistory(segment.sequence)
                    released.append((segment, nil))
                    continue
                }
                let spare = try files.release(segment.sequence, spareCount: spareCount, maxSpares: options.maxSpareSegments)
                if spare != nil { spareCount += 1 }
                released.append((segment, spare))
            }
            if keepsHistory { try files.pruneHistory(options.history, nextLSN: nextLSN) }
        }
        monitor.lock()
        state.releasing = false
        defer { wakeWaiters() }
        for (segment, spare) in released {
            state.segments.removeAll { $0.sequence == segment.sequence }
            if let spare { state.spares.append(spare) }
        }
        state.statistics.segmentsReleased += released.count
        if !released.isEmpty {
            options.logger.debug("released \(released.count) log segment(s) through LSN \(lsn.rawValue)",
                               metadata: ["spares": "\(released.filter { $0.1 != nil }.count)"])
        }
        if case .failure(let error) = result {
            throw (error as? FileIOError).map(WALError.io) ?? error
        }
        return released.count
    }

    /// Asks for a new segment before the first group that holds a batch after `lsn` (a
    /// checkpoint now holds every batch through it), so that the segment being appended to
    /// becomes releasable once that group is written. Sized after the bytes the current one
    /// used. Writes nothing itself.
    package func rotate(after lsn: LSN) {
        monitor.lock()
        defer { monitor.unlock() }
        state.rotateAfter = lsn
    }

    /// Shrinks the log back once a checkpoint holds every batch in it (`lsn` at or after
    /// the last one written): starts a fresh segment (after syncing the current one, WriteAheadLog.W4)
    /// of `firstSegmentBytes` and releases every older segment. At a close
    /// (`keepingSpares` false) the fresh segment is the smallest (4 KiB) and the spares
    /// are removed too, so a closed store keeps one tiny segment; after a checkpoint they
    /// stay for reuse. Does nothing, and writes nothing, when batches after `lsn` are in
    /// the log or queued, when the log failed, or when there is nothing to release (at a
    /// close: when the log already is one empty smallest segment and no spare). Returns
    /// whether it changed the log.
    @discardableResult
    package func shrink(through lsn: LSN, keepingSpares: Bool = false) throws -> Bool {
        monitor.lock()
        defer { monitor.unlock() }
        while state.flushing || state.releasing { monitor.wait() }
        guard !state.closed else { throw WALError.closed }
        guard state.failure == nil, state.queue.isEmpty, state.writtenLSN <= lsn else { return false }
        let holdsFrames = state.segments.count > 1 || state.active.offset > WALFormat.segmentHeaderBytes
        // At a close, an empty segment larger than the smallest is replaced too: a closed,
        // checkpointed log is one segment of `WALFormat.smallestSegmentBytes` (the next
        // segment starts at the first size again).
        let replace = holdsFrames || (!keepingSpares && state.active.capacity > WALFormat.smallestSegmentBytes)
        guard replace || (!keepingSpares && !state.spares.isEmpty) else { return false }
        state.flushing = true
        let old = state.active
        let older = state.segments
        let spares = keepingSpares ? [] : state.spares
        // No batch is queued: the log is idle, so it starts over at the first size (and
        // grows again by doubling if writes resume).
        let previousBytes = 0
        let needsSync = state.durableLSN < state.writtenLSN
        let firstLSN = state.nextLSN
        var spareCount = keepingSpares ? state.spares.count : 0
        let maxSpares = keepingSpares ? options.maxSpareSegments : 0
        let keepsHistory = state.keepsHistory
        monitor.unlock()

        var started: ActiveSegment?
        var removed: [String] = []
        var newSpares: [String] = []
        var syncs = 0
        let result = Result {
            if replace {
                if needsSync {
                    try old.handle.syncData()
                    syncs += 1
                }
                started = try ActiveSegment.start(sequence: old.sequence + 1, firstLSN: firstLSN, previousBytes: previousBytes,
                                                  minimumBytes: 0, files: files, options: options, reusing: nil,
                                                  smallest: !keepingSpares)
                for segment in older {
                    if keepsHistory {
                        try files.moveToHistory(segment.sequence)
                    } else if let spare = try files.release(segment.sequence, spareCount: spareCount, maxSpares: maxSpares) {
                        newSpares.append(spare)
                        spareCount += 1
                    }
                    removed.append(segment.path)
                }
                if keepsHistory { try files.pruneHistory(options.history, nextLSN: firstLSN) }
            }
            for spare in spares {
                try files.fileSystem.removeFile(spare)
                removed.append(spare)
            }
            if !spares.isEmpty { try files.fileSystem.syncDirectory(files.directory) }
        }

        monitor.lock()
        state.flushing = false
        defer { wakeWaiters() }
        state.statistics.syncCount += syncs
        if needsSync && syncs > 0 { state.durableLSN = state.writtenLSN }
        if let started {
            try? old.handle.close()
            state.active = started
            state.segments.removeAll { removed.contains($0.path) }
            state.segments.append(Segment(sequence: started.sequence, path: started.path, firstLSN: firstLSN))
            state.statistics.segmentsStarted += 1
            state.statistics.segmentsReleased += older.filter { removed.contains($0.path) }.count
        }
        state.spares.removeAll { removed.contains($0) }
        state.spares += newSpares
        if case .failure(let error) = result {
            // WriteAheadLog.W6: a failed sync or rename may leave disk and memory apart; stop.
            state.failure = error as? FileIOError ?? .ioError(operation: .sync, path: old.path)
            throw (error as? FileIOError).map(WALError.io) ?? error
        }
        options.logger.debug("the log shrank back to one segment", metadata: ["first_lsn": "\(firstLSN.rawValue)"])
        return true
    }

    /// Leads one group commit. Called with the monitor held and no leader active; returns
    /// with it held, the group either done or failed, and waiters woken.
    func commitGroup() {
        precondition(!state.flushing && !state.queue.isEmpty, "a group commit led beside another, or with nothing queued")
        state.flushing = true
        var groupBytes = 0
        var count = 0
        var rawBytes = 0
        for pending in state.queue {
            let bytes = pending.encoded.frameBytes
            if count > 0 && groupBytes + bytes > options.maxGroupBytes { break }
            groupBytes += bytes
            rawBytes += pending.encoded.batchBytes
            count += 1
        }
        // The group leaves the queue now. When it is the whole queue (nearly always), the
        // queue's array becomes the group's and the last group's array, emptied, the
        // queue's: no array is made or copied.
        var group: [PendingBatch]
        if count == state.queue.count {
            group = []
            swap(&group, &state.spareQueue)
            swap(&group, &state.queue)
        } else {
            group = Array(state.queue.prefix(count))
            state.queue.removeFirst(count)
        }
        let first = group[0].lsn, last = group[count - 1].lsn
        let full = state.active.offset + groupBytes > state.active.capacity
        // A checkpoint holds every frame of the active segment: start the next one now, so
        // the checkpoint can release this one.
        var checkpointed = false
        if let after = state.rotateAfter, first > after {
            checkpointed = state.active.offset > WALFormat.segmentHeaderBytes && state.writtenLSN <= after
            state.rotateAfter = nil
        }
        let needsRotation = full || checkpointed
        let previousBytes = full ? state.active.capacity : state.active.offset
        let spare = needsRotation ? state.spares.popLast() : nil
        let writtenBefore = state.writtenLSN
        var durable = state.durableLSN
        var active = state.active
        // Sleepers an earlier group of this leader made ready (its own batch was not in
        // that group) wake now, not after this group's fdatasync as well.
        let wakes = takeWakes()
        monitor.unlock()
        for sleeper in wakes { sleeper.wake() }

        var attemptedWrite = false
        var syncs = 0
        var started = 0
        let result = Result { () throws -> Void in
            if needsRotation {
                // WriteAheadLog.W4: seal the current segment before the next one exists.
                if durable < writtenBefore {
                    try active.handle.syncData()
                    syncs += 1
                    durable = writtenBefore
                }
                let next = try ActiveSegment.start(sequence: active.sequence + 1, firstLSN: first,
                                                   previousBytes: previousBytes, minimumBytes: groupBytes,
                                                   files: files, options: options, reusing: spare)
                try? active.handle.close()
                active = next
                started += 1
            }
            let end = active.offset + groupBytes
            let writeEnd = Self.zeroAheadEnd(groupEnd: end, groupBytes: groupBytes, segment: active)
            attemptedWrite = true
            try groupFrames.write(group, salt: active.salt, durableLSN: durable, byteCount: writeEnd - active.offset,
                                  to: active.handle, at: active.offset)
            active.written = max(active.written, writeEnd)
            if options.durability == .full {
                try active.handle.syncData()
                syncs += 1
            }
        }
        // The batches' bytes are let go of before the monitor is taken again.
        let storedBytes = group.reduce(0) { $0 + $1.encoded.storedBytes }
        group.removeAll(keepingCapacity: true)

        monitor.lock()
        if state.spareQueue.capacity < group.capacity { swap(&group, &state.spareQueue) }
        state.flushing = false
        state.statistics.syncCount += syncs
        state.statistics.segmentsStarted += started
        if started > 0 {
            state.segments.append(Segment(sequence: active.sequence, path: active.path, firstLSN: first))
        }
        state.active = active
        state.durableLSN = durable
        switch result {
        case .success:
            state.active.offset += groupBytes
            state.writtenLSN = last
            if options.durability == .full { state.durableLSN = last }
            state.statistics.groupCount += 1
            state.statistics.bytesWritten += groupBytes
            state.statistics.largestGroup = max(state.statistics.largestGroup, count)
            state.rememberGroup(first.rawValue...last.rawValue)
            state.statistics.rawBytes += rawBytes
            state.statistics.storedBytes += storedBytes
        case .failure(let error):
            // WriteAheadLog.W6: memory and disk may disagree now; stop.
            state.failure = error as? FileIOError ?? .ioError(operation: .write, path: active.path)
            options.logger.error("a group commit's write or fdatasync failed; the log stops",
                               metadata: ["path": "\(active.path)", "first_lsn": "\(first.rawValue)",
                                          "last_lsn": "\(last.rawValue)", "outcome_unknown": "\(attemptedWrite)",
                                          "error": "\(error)"])
            if attemptedWrite { state.unknownOutcome = first.rawValue...last.rawValue }
        }
        // Its caller, `waitUntilDone`, wakes them once it released the monitor.
        wakeWaiters(afterUnlock: true)
    }

    /// How far ahead of a small group's frames zeros are written, within the segment
    /// (FORMAT.md, "Group commit"). A new segment is preallocated, and on Linux its blocks
    /// stay *unwritten* extents until written: an fdatasync after a write into one must
    /// also record the extent as written, which on a journaled ext4 commits a journal
    /// transaction. Zeros written ahead make the blocks written once per 64 KiB of log: on
    /// a journaled ext4, 3,000 one-key durable commits made 32 journal transactions
    /// instead of 115 (Benchmarks/JOURNAL.md, "Zeros ahead of the log"). Groups larger than
    /// a quarter of this write no zeros: each pays for its extents once, and zeros would
    /// double its bytes. Zeros end the log as preallocated space does (FORMAT.md, R1).
    static let zeroAheadBytes = 64 << 10

    /// Where the write of a group ending at `groupEnd` ends: past it, zeros to
    /// `zeroAheadBytes` beyond its last page, when the group is small and ends past what
    /// the segment has written; else at `groupEnd`.
    static func zeroAheadEnd(groupEnd: Int, groupBytes: Int, segment: ActiveSegment) -> Int {
        guard groupEnd > segment.written, groupBytes <= zeroAheadBytes / 4 else { return groupEnd }
        let page = 4_096
        let lastPageEnd = (groupEnd + page - 1) / page * page
        return max(groupEnd, min(segment.capacity, lastPageEnd + zeroAheadBytes))
    }
}

/// The memory a group commit's leader writes its frames through, kept from group to group
/// (at most `keptBytes`), so that a commit allocates nothing for its frames. A group that
/// fits is written with one write; a larger one a window of `keptBytes` at a time, so that
/// no group is laid out whole in memory of its own: a group of 64 MiB of values took
/// 32 MiB of fresh memory for every commit (Benchmarks/JOURNAL.md, "Commits of 64 MiB").
/// Only the leader (`WriterState.flushing`) touches it, one group at a time.
final class GroupFrames: @unchecked Sendable {
    /// The most memory kept between groups: a small group with its zeros written ahead
    /// (`WriteAheadLog.zeroAheadBytes`) fits, and is written with one write.
    static let keptBytes = 256 << 10
    private var kept = UnsafeMutableRawBufferPointer(start: nil, count: 0)

    deinit { kept.deallocate() }

    /// Writes `group`'s frames at `offset` of `file`: each fragment's header and payload,
    /// padded with zeros to 8 bytes, then zeros to `byteCount` bytes in all (the zeros
    /// written ahead). One write when `byteCount` is at most `keptBytes`, else one per
    /// window of that size.
    func write(_ group: [PendingBatch], salt: UInt32, durableLSN: LSN, byteCount: Int,
               to file: any OpenFile, at offset: Int) throws {
        let windowBytes = min(byteCount, Self.keptBytes)
        if kept.count < windowBytes {
            kept.deallocate()
            kept = .allocate(byteCount: max(windowBytes, 4_096), alignment: 16)
        }
        var window = FrameWindow(memory: UnsafeMutableRawBufferPointer(rebasing: kept[..<windowBytes]), file: file, offset: offset)
        var framed = 0
        for pending in group {
            let lsn = pending.lsn, batchBytes = pending.encoded.batchBytes
            try pending.encoded.forEachFragment { fragment, payload in
                let header = try window.reserve(WALFormat.frameHeaderBytes)
                FrameHeader.encode(salt: salt, lsn: lsn, durableLSN: durableLSN, rawBytes: fragment.rawBytes, batchBytes: batchBytes,
                                   compressed: fragment.compressed, kind: fragment.kind, payload: payload, into: header, at: 0)
                let frameBytes = WALFormat.frameBytes(payloadBytes: payload.count)
                try window.append(payload, count: payload.count)
                try window.append(nil, count: frameBytes - header.count - payload.count)
                framed += frameBytes
            }
        }
        try window.append(nil, count: byteCount - framed)
        try window.flush()
        let written = window.written
        precondition(written == byteCount, "a group's frames took \(written) bytes of the \(byteCount) measured")
    }
}

/// The kept memory `GroupFrames.write` fills, written out at the group's place in the
/// file each time it is full and once at the end.
private struct FrameWindow {
    let memory: UnsafeMutableRawBufferPointer
    let file: any OpenFile
    let offset: Int
    /// Bytes in `memory` not yet written, and bytes of the group written so far.
    var filled = 0, written = 0

    /// Writes what `memory` holds at its place in the file.
    mutating func flush() throws {
        guard filled > 0 else { return }
        try file.write(UnsafeRawBufferPointer(rebasing: memory[..<filled]), at: Int64(offset + written))
        written += filled
        filled = 0
    }

    /// The next `count` bytes of `memory` (at most all of it) for the caller to fill, after
    /// writing out what it holds when they do not fit.
    mutating func reserve(_ count: Int) throws -> UnsafeMutableRawBufferPointer {
        precondition(count <= memory.count, "\(count) bytes reserved in a window of \(memory.count)")
        if memory.count - filled < count { try flush() }
        defer { filled += count }
        return UnsafeMutableRawBufferPointer(rebasing: memory[filled..<(filled + count)])
    }

    /// Copies `count` bytes of `bytes` (zeros when nil) into `memory`, writing it out each
    /// time it is full and more bytes follow.
    mutating func append(_ bytes: UnsafeRawBufferPointer?, count: Int) throws {
        var done = 0
        while done < count {
            if filled == memory.count { try flush() }
            let n = min(count - done, memory.count - filled)
            let target = UnsafeMutableRawBufferPointer(rebasing: memory[filled..<(filled + n)])
            if let bytes {
                target.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[done..<(done + n)]))
            } else {
                target.initializeMemory(as: UInt8.self, repeating: 0)
            }
            filled += n
            done += n
        }
    }
}
