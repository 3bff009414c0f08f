// Reads a log's segments in order and hands every batch to a visitor, telling a torn tail
// from corruption (FORMAT.md, "Reading and recovery", rules R1–R6). Read-only: applying
// what it found (cutting the tail, removing files) is `WriteAheadLog.open`'s job.
//
// Invariants:
//  1. Every frame's checksum is verified before its payload is decompressed, and every
//     length is checked against `WALFormat` limits and the bytes present before use.
//  2. Batches reach the visitor in LSN order, each exactly once, and only whole.
//  3. Every loop is bounded by the bytes of the segment being read.
//  4. A segment is read through a bounded window (`SegmentWindow`): memory does not grow
//     with the file's size, only with the batch being assembled.
import StrataCodec
import StrataFileIO

struct WALReader {
    let files: SegmentFiles
    let mode: RecoveryMode
    /// Batches before this LSN are verified but not decompressed, decoded or visited.
    var replayFrom = LSN.none
    /// Reading stops after this batch (for a reader beside a live writer: the newest batch
    /// the writer made durable; the frames after it may be being written).
    var readThrough: LSN?
    /// Segments wholly before the one that may hold this LSN are not read at all.
    var skipSegmentsBefore: LSN?
    /// Where an earlier read of this log stopped: reading starts there, at that batch,
    /// when that segment is still listed (a reader that follows a live writer).
    var resumeAt: LogPosition?

    /// Reads every segment; calls `visit` for each batch in LSN order. Throws `WALError`.
    func read(_ visit: (WALRecord) throws -> Void) throws -> (WALRecoveryReport, WALTail) {
        let listing: (segments: [(sequence: UInt64, path: String)], spares: [String], temporaries: [String])
        do { listing = try files.list() } catch let error as FileIOError { throw WALError.io(error) }
        var report = WALRecoveryReport()
        var tail = WALTail(segments: [], salt: 0, offset: WALFormat.segmentHeaderBytes, needsNewSegment: true,
                           discardedSegments: [], unproven: [], temporaries: listing.temporaries, spares: listing.spares,
                           nextLSN: LSN(1))
        var proof = DurabilityProof()
        var expected: LSN?
        var index = 0
        let segments = listing.segments
        if let skipBefore = skipSegmentsBefore {
            // The last segment that starts at or before that LSN holds it (or the log ends
            // before it): read from there.
            var first = segments.count - 1
            while first > 0, try peekFirstLSN(segments[first].path) > skipBefore { first -= 1 }
            index = max(0, first)
        }
        let resumeIndex = resumeAt.flatMap { resume in segments.firstIndex { $0.path == resume.path } }
        if let resumeIndex { index = resumeIndex }
        if let last = segments.last, last.sequence >= WALFormat.maxSegmentSequence {
            throw WALError.corruptSegmentHeader(path: last.path, reason:
                "its sequence number \(last.sequence) is past the largest a log uses (\(WALFormat.maxSegmentSequence - 1))")
        }
        for (previous, current) in zip(segments, segments.dropFirst()) where current.sequence != previous.sequence + 1 {
            throw WALError.missingData(path: current.path, reason: "segment \(previous.sequence + 1) before it is missing")
        }
        while index < segments.count {
            let (sequence, path) = segments[index]
            let window = try SegmentWindow(path: path, fileSystem: files.fileSystem)
            let header = try SegmentHeader.decode(window.prefix(WALFormat.segmentHeaderBytes), path: path)
            guard header.sequence == sequence else {
                throw WALError.corruptSegmentHeader(path: path, reason: "its sequence number \(header.sequence) is not its name's")
            }
            if let expected, header.firstLSN != expected {
                guard mode == .skipCorrupted && header.firstLSN > expected else {
                    throw WALError.missingData(path: path, reason:
                        "it starts at \(header.firstLSN) but the log before it ends at LSN \(expected.rawValue - 1)")
                }
            }
            report.segmentCount += 1
            tail.segments.append((sequence, path, header.firstLSN))
            var segment = SegmentScan(path: path, window: window, salt: header.salt, expected: header.firstLSN,
                                      replayFrom: replayFrom, proof: proof)
            segment.readThrough = readThrough
            if let resumeAt, index == resumeIndex, resumeAt.offset > WALFormat.segmentHeaderBytes {
                segment.offset = resumeAt.offset
                segment.expected = resumeAt.lsn
            }
            let nextFirstLSN = index + 1 < segments.count ? try peekFirstLSN(segments[index + 1].path) : nil
            let outcome = try segment.run(mode: mode, nextFirstLSN: nextFirstLSN, report: &report, visit: visit)
            proof = segment.proof
            let fileBytes = window.size
            if nextFirstLSN == nil, fileBytes < header.capacityBytes {
                // Segments are made at their full size before they get their name, and appends
                // change no size: a shorter file was cut, and batches after its end are gone.
                report.damage.append(WALDamage(
                    path: path, offset: Int64(fileBytes), expectedLSN: segment.expected,
                    reason: "the file is \(fileBytes) bytes but was made \(header.capacityBytes) bytes long; "
                        + "batches from \(segment.expected) on that were in its missing end are lost",
                    kind: .truncated, byteCount: Int(header.capacityBytes) - fileBytes)) // capacity ≤ 1 GiB (SegmentHeader)
            }
            expected = segment.expected
            tail.salt = header.salt
            tail.offset = segment.offset
            tail.nextLSN = segment.expected
            // Frames of this format's version go to a segment whose header says so: a reader
            // of an older version then refuses the log by its header, not as corruption.
            tail.needsNewSegment = outcome != .cleanEnd || header.version < WALFormat.version
            if outcome == .stopHere {
                tail.discardedSegments = segments[(index + 1)...].map(\.path)
                break
            }
            if outcome == .readThrough { break }
            index += 1
        }
        if segments.isEmpty { tail.needsNewSegment = true }
        tail.unproven = proof.unproven
        return (report, tail)
    }

    private func peekFirstLSN(_ path: String) throws -> LSN {
        do {
            let handle = try files.fileSystem.open(path, options: [])
            defer { try? handle.close() }
            return try SegmentHeader.decode(handle.read(count: WALFormat.segmentHeaderBytes, at: 0), path: path).firstLSN
        } catch let error as FileIOError {
            throw WALError.io(error)
        }
    }
}

/// A frame boundary in a log: the segment file, the offset of the next frame in it, and
/// the LSN of the batch that frame must begin.
package struct LogPosition: Sendable, Equatable {
    package var path: String
    package var offset: Int
    package var lsn: LSN

    package init(path: String, offset: Int, lsn: LSN) {
        self.path = path
        self.offset = offset
        self.lsn = lsn
    }
}

/// How reading one segment ended.
enum SegmentOutcome: Equatable {
    /// At zeros or frames of an earlier use of the file: appending may continue here.
    case cleanEnd
    /// At a torn tail or cut-off damage: appending must start a new segment.
    case cut
    /// `.pointInTime` stopped here: later segments are discarded.
    case stopHere
    /// The batch at `WALReader.readThrough` was read: nothing after it is.
    case readThrough
}

/// The state of reading one segment's frames.
struct SegmentScan {
    let path: String
    let window: SegmentWindow
    let salt: UInt32
    /// The LSN the next batch must carry.
    var expected: LSN
    /// Offset of the next frame.
    var offset = WALFormat.segmentHeaderBytes
    /// Batches before this LSN are skipped once their frames verify.
    let replayFrom: LSN
    /// The last batch to read (see `WALReader.readThrough`).
    var readThrough: LSN?
    /// The frames read so far that no durable LSN covers.
    var proof: DurabilityProof

    /// A batch whose first fragments were read.
    private struct Partial {
        var lsn: LSN
        var offset: Int
        /// Decodes the fragments as they come, checking every field at once.
        var stream: BatchStream
        /// The stored payloads of the fragments so far (a batch of several frames).
        var fragments: [WALRecord.Fragment] = []
        /// Decompressed bytes of the fragments so far, as their headers declare.
        var rawSeen = 0
        var batchBytes: Int
        var frames = 0
        var stored = 0
        /// Why the batch does not decode, once a fragment showed it: the rest of its frames
        /// are verified but not decoded.
        var defect: String?

        init(lsn: LSN, offset: Int, batchBytes: Int) {
            self.lsn = lsn
            self.offset = offset
            self.batchBytes = batchBytes
            stream = BatchStream(batchBytes: batchBytes)
        }
    }

    private var partial: Partial?

    init(path: String, window: SegmentWindow, salt: UInt32, expected: LSN, replayFrom: LSN = .none,
         proof: DurabilityProof = DurabilityProof()) {
        self.path = path
        self.window = window
        self.salt = salt
        self.expected = expected
        self.replayFrom = replayFrom
        self.proof = proof
    }

    mutating func run(mode: RecoveryMode, nextFirstLSN: LSN?, report: inout WALRecoveryReport,
                      visit: (WALRecord) throws -> Void) throws -> SegmentOutcome {
        while true {
            if let readThrough, expected > readThrough, partial == nil { return .readThrough }
            let (header, defect) = try check(at: offset)
            if let header, defect == nil {
                guard let damaged = try accept(header, report: &report, visit: visit) else { continue }
                if let outcome = try settle(damaged, mode: mode, nextFirstLSN: nextFirstLSN, report: &report) {
                    return outcome
                }
                continue
            }
            // R3: the bytes here do not continue the log. What they mean depends on what follows.
            let cutOffset = partial?.offset ?? offset
            let ending = try isEndMarker(at: offset)
            let cleanEnd = partial == nil && ending
            var reason = defect ?? "the frame does not follow the one before it"
            if let partial {
                // The batch in progress is what is damaged: say so, not what the bytes after it are.
                reason = "the batch of \(partial.lsn) stops after \(partial.frames) of its fragments "
                    + "(\(partial.rawSeen) of its \(partial.batchBytes) bytes)" + (ending ? "" : ": the next frame \(reason)")
            }
            if let nextFirstLSN, nextFirstLSN == expected {
                // R4: the next segment continues at exactly this LSN; the rest of this one is unused
                // (normal rotation) or was abandoned by an earlier recovery.
                partial = nil
                return .cleanEnd
            }
            // R7: damage in batches the data file already holds costs nothing.
            switch try stepOverCovered(at: cutOffset, reason: reason, nextFirstLSN: nextFirstLSN, report: &report) {
            case .notCovered: break
            case .resumed: continue
            case let .ended(outcome): return outcome
            }
            if let nextFirstLSN, cleanEnd {
                // The frames stop cleanly but the next segment does not continue from here.
                let reason = "its frames end before \(expected) but the next segment starts at \(nextFirstLSN)"
                switch mode {
                case .skipCorrupted where nextFirstLSN > expected:
                    report.damage.append(damage(at: offset, reason: reason, corruption: true, end: offset))
                    return .cleanEnd
                case .pointInTime:
                    report.damage.append(damage(at: offset, reason: reason, corruption: true, end: offset))
                    return .stopHere
                default:
                    throw WALError.missingData(path: path, reason: reason)
                }
            }
            let remnants = try nextFirstLSN == nil ? scanRemnants(after: offset) : (vouched: true, end: offset)
            if !remnants.vouched {
                // R5: nothing later vouches for this frame: a torn tail of a group never acknowledged.
                if cleanEnd && remnants.end == offset { return .cleanEnd }
                // The bad frame's own bytes go with it: all of them when its header is this
                // segment's and its length in range, else the header's.
                let frameBytes = header.flatMap { header in
                    header.salt == salt && header.storedBytes > 0 && header.storedBytes <= UInt32(WALFormat.maxFragmentBytes)
                        ? WALFormat.frameBytes(payloadBytes: Int(header.storedBytes)) : nil
                } ?? WALFormat.frameHeaderBytes
                let end = max(remnants.end, min(window.size, offset + frameBytes))
                report.damage.append(damage(at: cutOffset, reason: reason, corruption: false, end: end))
                partial = nil
                offset = cutOffset
                return .cut
            }
            // R6: later frames vouch for it, or a later segment exists: corruption.
            switch mode {
            case .strict:
                throw WALError.corruptFrame(path: path, offset: Int64(offset), lsn: expected, reason: reason)
            case .tolerateCorruptedTail where nextFirstLSN != nil:
                throw WALError.corruptFrame(path: path, offset: Int64(offset), lsn: expected, reason: reason)
            case .tolerateCorruptedTail, .pointInTime:
                report.damage.append(damage(at: cutOffset, reason: reason, corruption: true, end: window.size))
                partial = nil
                offset = cutOffset
                return mode == .pointInTime && nextFirstLSN != nil ? .stopHere : .cut
            case .skipCorrupted:
                guard let next = try nextValidFrame(after: offset) else {
                    report.damage.append(damage(at: cutOffset, reason: reason, corruption: true, end: window.size))
                    partial = nil
                    offset = cutOffset
                    return .cut
                }
                report.damage.append(damage(at: cutOffset, reason: reason, corruption: true, end: next.offset))
                partial = nil
                offset = next.offset
                expected = next.lsn
            }
        }
    }

    /// What stepping over damage in checkpointed batches found.
    private enum CoveredStep {
        /// The damage is not (only) in checkpointed batches: the other rules decide.
        case notCovered
        /// Reading goes on at a later frame of this segment.
        case resumed
        /// This segment's data ends here.
        case ended(SegmentOutcome)
    }

    /// R7: when the batch expected at `start` is at or below the data file's checkpoint, the
    /// frames from there on need only continue the log by the first batch after it. Damage
    /// before that is reported as `.covered` and read past: to the next frame that starts a
    /// batch at or below `replayFrom`, to the next segment when it starts there, or, in the
    /// last segment, to its end (the log then continues at `replayFrom`).
    private mutating func stepOverCovered(at start: Int, reason: String, nextFirstLSN: LSN?,
                                          report: inout WALRecoveryReport) throws -> CoveredStep {
        guard expected < replayFrom else { return .notCovered }
        if let nextFirstLSN {
            guard nextFirstLSN <= replayFrom else { return .notCovered }
            report.damage.append(damage(at: start, reason: reason, kind: .covered, end: offset))
            partial = nil
            expected = nextFirstLSN
            return .ended(.cleanEnd)
        }
        let later = try framesVerifying(after: offset)
        if let next = later.first(where: { $0.1.lsn >= expected && $0.1.startsBatch }) {
            guard next.1.lsn <= replayFrom else { return .notCovered }
            report.damage.append(damage(at: start, reason: reason, kind: .covered, end: next.0))
            partial = nil
            offset = next.0
            expected = next.1.lsn
            return .resumed
        }
        // Nothing after the damage starts a batch; a fragment of one after the checkpoint
        // would mean lost commits.
        guard !later.contains(where: { $0.1.lsn >= replayFrom }) else { return .notCovered }
        let end = later.last.map { $0.0 + WALFormat.frameBytes(payloadBytes: Int($0.1.storedBytes)) } ?? offset
        report.damage.append(damage(at: start, reason: try isEndMarker(at: offset)
                                        ? "the log ends at \(LSN(expected.rawValue - 1)) but the data file holds every batch "
                                            + "to \(LSN(replayFrom.rawValue - 1))"
                                        : reason,
                                    kind: .covered, end: end))
        partial = nil
        offset = start
        expected = replayFrom
        return .ended(.cut)
    }

    /// Verifies the frame at `offset` and that it continues the log (FORMAT.md, R1 and R2).
    private func check(at offset: Int) throws -> (FrameHeader?, String?) {
        let (header, defect) = try window.withBytes(at: offset, count: SegmentWindow.frameSpan) { buffer, index in
            FrameHeader.defect(in: buffer, at: index, salt: salt)
        }
        guard let header, defect == nil else { return (header, defect) }
        let kind = FragmentKind(rawValue: header.kind)!
        if let partial {
            guard header.lsn == partial.lsn, kind == .middle || kind == .last,
                  Int(header.batchBytes) == partial.batchBytes,
                  partial.rawSeen + Int(header.rawBytes) <= partial.batchBytes else {
                return (header, "it does not continue the fragments of \(partial.lsn)")
            }
        } else {
            guard header.lsn == expected else { return (header, "it carries \(header.lsn), not \(expected)") }
            guard kind == .full || kind == .first else { return (header, "a batch starts with a middle or last fragment") }
            guard kind == .first || header.rawBytes == header.batchBytes else {
                return (header, "a whole batch's frame declares a different batch size")
            }
        }
        return (header, nil)
    }

    /// A batch whose frames verify but whose bytes do not decode.
    private struct DamagedBatch {
        var lsn: LSN
        var offset: Int
        var reason: String
    }

    /// Takes a verified frame: decodes it as part of its batch (checking every field as it
    /// is read), and visits the batch once its last frame was read. Returns the batch when
    /// its bytes do not decode, for the recovery mode to decide.
    private mutating func accept(_ header: FrameHeader, report: inout WALRecoveryReport,
                                 visit: (WALRecord) throws -> Void) throws -> DamagedBatch? {
        let payloadStart = offset + WALFormat.frameHeaderBytes
        let payloadCount = Int(header.storedBytes)
        let skipped = header.lsn < replayFrom
        let kind = FragmentKind(rawValue: header.kind)!
        var current = partial ?? Partial(lsn: header.lsn, offset: offset, batchBytes: Int(header.batchBytes))
        partial = nil
        proof.read(FrameExtent(path: path, offset: offset, end: offset + WALFormat.frameBytes(payloadBytes: payloadCount),
                               lsn: header.lsn), vouching: header.durableLSN)
        // Batches before `replayFrom` are verified by their checksums (FORMAT.md, R1); their bytes are
        // not needed. The others are decoded fragment by fragment: a field over a limit is
        // refused before anything is built for it, and only a batch of one frame keeps its
        // decoded bytes (a larger one keeps its stored payloads, decoded again when visited).
        var whole: [UInt8]?
        if !skipped && current.defect == nil {
            do {
                try window.withBytes(at: payloadStart, count: payloadCount) { buffer, index in
                    let payload = UnsafeRawBufferPointer(rebasing: buffer[index..<(index + payloadCount)])
                    let raw = header.isCompressed
                        ? try LZ4Block.decompress(payload, decompressedCount: Int(header.rawBytes)) : Array(payload)
                    try raw.withUnsafeBytes { try current.stream.feed($0) { _, _, _ in } }
                    if kind == .full {
                        whole = raw
                    } else {
                        current.fragments.append(WALRecord.Fragment(payload: header.isCompressed ? Array(payload) : raw,
                                                                    rawBytes: raw.count, compressed: header.isCompressed))
                    }
                }
            } catch let error as CodecError {
                current.defect = "\(error)"
                current.fragments = []
            }
        }
        current.rawSeen += Int(header.rawBytes)
        current.frames += 1
        current.stored += payloadCount
        offset += WALFormat.frameBytes(payloadBytes: payloadCount)
        guard kind == .full || kind == .last else {
            partial = current
            return nil
        }
        if current.defect == nil && current.rawSeen != current.batchBytes {
            current.defect = "its fragments hold \(current.rawSeen) bytes, not \(current.batchBytes)"
        }
        if !skipped && current.defect == nil {
            do { try current.stream.finish() } catch { current.defect = "\(error)" }
        }
        if let defect = current.defect {
            return DamagedBatch(lsn: current.lsn, offset: current.offset, reason: defect)
        }
        if report.firstLSN == .none { report.firstLSN = current.lsn }
        report.lastLSN = current.lsn
        report.batchCount += 1
        report.frameCount += current.frames
        report.rawBytes += current.batchBytes
        report.storedBytes += current.stored
        expected = current.lsn.next
        guard !skipped else { return nil }
        let record = WALRecord(lsn: current.lsn, path: path, offset: Int64(current.offset), frameCount: current.frames,
                               rawBytes: current.batchBytes, storedBytes: current.stored,
                               operationCount: current.stream.operationsRead,
                               body: whole.map { .whole($0) } ?? .fragments(current.fragments))
        if report.damage.contains(where: \.mayHaveLostCommits) {
            report.batchesAfterDamage.append(WALBatchAfterDamage(lsn: record.lsn, path: path, offset: record.offset,
                                                                 operationCount: record.operationCount, outcome: .applied))
        }
        try visit(record)
        return nil
    }

    /// What the recovery mode makes of a batch whose frames verify but whose bytes do not
    /// decode (`offset` is just after its last frame): nil to read on, or how the segment ends.
    private mutating func settle(_ batch: DamagedBatch, mode: RecoveryMode, nextFirstLSN: LSN?,
                                 report: inout WALRecoveryReport) throws -> SegmentOutcome? {
        // R4: the next segment continues at exactly this batch: the rest of this one was
        // abandoned (by a point-in-time salvage that cut the log here).
        if nextFirstLSN == batch.lsn { return .cleanEnd }
        let reason = "the batch does not decode: \(batch.reason)"
        switch mode {
        case .strict:
            throw WALError.corruptBatch(path: path, offset: Int64(batch.offset), lsn: batch.lsn, reason: batch.reason)
        case .tolerateCorruptedTail where nextFirstLSN != nil:
            throw WALError.corruptBatch(path: path, offset: Int64(batch.offset), lsn: batch.lsn, reason: batch.reason)
        case .tolerateCorruptedTail, .pointInTime:
            report.damage.append(damage(at: batch.offset, reason: reason, kind: .corruption, end: window.size))
            offset = batch.offset
            return mode == .pointInTime && nextFirstLSN != nil ? .stopHere : .cut
        case .skipCorrupted:
            report.damage.append(damage(at: batch.offset, reason: reason, kind: .corruption, end: offset))
            report.batchesAfterDamage.append(WALBatchAfterDamage(lsn: batch.lsn, path: path, offset: Int64(batch.offset),
                                                                 operationCount: 0, outcome: .skipped(reason: batch.reason)))
            expected = batch.lsn.next
            return nil
        }
    }

    /// Whether the bytes at `offset` are where the log's data ends in this file: the end of
    /// the file, a zeroed header (preallocated space), or a frame of an earlier use.
    private func isEndMarker(at offset: Int) throws -> Bool {
        guard offset + WALFormat.frameHeaderBytes <= window.size else { return true }
        return try window.withBytes(at: offset, count: WALFormat.frameHeaderBytes) { buffer, index in
            let header = FrameHeader.parse(buffer, at: index)
            // A header carrying the LSN expected here is this log's frame, damaged (its salt
            // included): frames of an earlier use of the file carry older LSNs.
            guard header.lsn != expected else { return false }
            return header.salt != salt || buffer[index..<(index + WALFormat.frameHeaderBytes)].allSatisfy { $0 == 0 }
        }
    }

    /// Looks for frames of this use of the file after `offset` (R5): whether any vouches
    /// that the frame expected at `offset` was durable, and where the last one ends.
    private func scanRemnants(after offset: Int) throws -> (vouched: Bool, end: Int) {
        var end = offset
        for (position, header) in try framesVerifying(after: offset) {
            if header.durableLSN >= expected { return (true, position) }
            end = position + WALFormat.frameBytes(payloadBytes: Int(header.storedBytes))
        }
        return (false, end)
    }

    /// The next frame after `offset` that verifies and could start a batch past `expected`.
    private func nextValidFrame(after offset: Int) throws -> (offset: Int, lsn: LSN)? {
        for (position, header) in try framesVerifying(after: offset) where header.lsn >= expected {
            if header.startsBatch { return (position, header.lsn) }
        }
        return nil
    }

    /// Every aligned position after `offset` holding a frame of this segment's salt that
    /// verifies on its own (whether or not it continues the log). O(bytes / 8), read window
    /// by window.
    private func framesVerifying(after offset: Int) throws -> [(Int, FrameHeader)] {
        let saltBytes = (UInt8(truncatingIfNeeded: salt), UInt8(truncatingIfNeeded: salt >> 8),
                         UInt8(truncatingIfNeeded: salt >> 16), UInt8(truncatingIfNeeded: salt >> 24))
        var found: [(Int, FrameHeader)] = []
        var position = offset + WALFormat.frameAlignment
        while position + WALFormat.frameHeaderBytes <= window.size {
            position = try window.withBytes(at: position, count: SegmentWindow.windowBytes) { buffer, index in
                // Positions whose whole frame could lie in the buffer: up to the file's end
                // when the buffer reaches it, else a largest frame short of the buffer's end.
                let reachesEnd = position - index + buffer.count == window.size
                let limit = reachesEnd ? buffer.count - WALFormat.frameHeaderBytes : buffer.count - SegmentWindow.frameSpan
                var local = index
                while local <= limit {
                    // Most positions fail on the salt's first byte.
                    if buffer[local + 4] == saltBytes.0 && buffer[local + 5] == saltBytes.1
                        && buffer[local + 6] == saltBytes.2 && buffer[local + 7] == saltBytes.3 {
                        let (header, defect) = FrameHeader.defect(in: buffer, at: local, salt: salt)
                        if let header, defect == nil { found.append((position - index + local, header)) }
                    }
                    local += WALFormat.frameAlignment
                }
                return position - index + local
            }
        }
        return found
    }

    private func damage(at start: Int, reason: String, corruption: Bool, end: Int) -> WALDamage {
        damage(at: start, reason: reason, kind: corruption ? .corruption : .tornTail, end: end)
    }

    private func damage(at start: Int, reason: String, kind: WALDamage.Kind, end: Int) -> WALDamage {
        WALDamage(path: path, offset: Int64(start), expectedLSN: expected, reason: reason, kind: kind,
                  byteCount: max(0, end - start))
    }
}

/// Which frames read so far no durable LSN covers (WriteAheadLog.W5 of the writer: a frame records the
/// highest LSN that was on stable storage when it was written, so it proves every frame at
/// or below that LSN durable).
struct DurabilityProof {
    private(set) var durableLSN = LSN.none
    private(set) var unproven: [FrameExtent] = []

    mutating func read(_ frame: FrameExtent, vouching vouched: LSN) {
        if vouched > durableLSN {
            durableLSN = vouched
            unproven.removeAll { $0.lsn <= vouched }
        }
        if frame.lsn > durableLSN { unproven.append(frame) }
    }
}

/// A segment file read through a window of at most `windowBytes` (or one largest frame):
/// recovery's memory does not grow with the file. Reads are sequential in practice (the
/// scan moves forward), so each byte is read about once. The window starts at
/// `firstWindowBytes` and doubles with each read: a reader beside a writer reads on from
/// where it stopped a few times a second, usually a few frames before the end of what was
/// written, and a first read of 4 MiB of a preallocated segment (a fresh buffer, mostly
/// zeros past the last frame) was a fifth of such a reader's time.
final class SegmentWindow {
    let path: String
    /// The file's size when it was opened.
    let size: Int
    private let handle: any OpenFile
    /// The file offset of `buffer[0]`.
    private var start = 0
    private var buffer: [UInt8] = []
    /// The bytes the next read takes, unless a request needs more.
    private var nextWindowBytes = SegmentWindow.firstWindowBytes

    /// The most bytes held at once, unless one request needs more.
    static let windowBytes = 4 << 20
    /// The first read's bytes.
    static let firstWindowBytes = 64 << 10
    /// The bytes a frame can span: header, largest payload, padding.
    static let frameSpan = WALFormat.frameHeaderBytes + WALFormat.maxFragmentBytes + WALFormat.frameAlignment

    /// Opens the segment at `path`. Throws `WALError.segmentTooLarge` for a file larger than
    /// any a log writes, `WALError.io` when it cannot be read.
    init(path: String, fileSystem: any FileSystem) throws {
        self.path = path
        do {
            handle = try fileSystem.open(path, options: [])
            let size = try handle.size()
            guard size <= WALFormat.maxSegmentFileBytes else {
                try? handle.close()
                throw WALError.segmentTooLarge(path: path, byteCount: size, limit: WALFormat.maxSegmentFileBytes)
            }
            self.size = Int(size)
        } catch let error as FileIOError {
            throw WALError.io(error)
        }
    }

    deinit { try? handle.close() }

    /// The file's first `count` bytes (fewer when it is shorter).
    func prefix(_ count: Int) throws -> [UInt8] {
        try withBytes(at: 0, count: count) { buffer, index in Array(buffer[index..<min(buffer.count, index + count)]) }
    }

    /// Calls `body` with a buffer holding the file's bytes from `offset` up to `offset +
    /// count` or the file's end, whichever comes first (it may hold more), and `offset`'s
    /// index in it. The buffer ends either at the file's end or at least `count` bytes
    /// after `offset`.
    func withBytes<T>(at offset: Int, count: Int, _ body: (UnsafeRawBufferPointer, Int) throws -> T) throws -> T {
        let end = min(size, offset + count)
        if offset < start || end > start + buffer.count {
            let length = max(0, min(size - offset, max(count, nextWindowBytes)))
            nextWindowBytes = min(2 * nextWindowBytes, Self.windowBytes)
            do { buffer = try handle.read(count: length, at: Int64(offset)) } catch let error as FileIOError {
                throw WALError.io(error)
            }
            start = offset
            guard buffer.count == length else {
                // The file shrank while it was read: nothing after this point is trusted.
                throw WALError.io(.ioError(operation: .read, path: path))
            }
        }
        return try buffer.withUnsafeBytes { try body($0, offset - start) }
    }
}
