import StrataFileIO
import Testing
@testable import StrataWAL

/// Recovery never builds on a frame it cannot prove durable, never reads a cut or damaged
/// tail as a clean end, and steps over damage that only checkpointed batches took.
@Suite struct WALTrustTests {
    /// After a failed fdatasync that lost the frame's dirty pages ("fsyncgate"), a reopen in
    /// the same boot still reads the frame from the page cache. The frames it then appends
    /// record it as durable; if it was not, a later power loss left a hole under frames
    /// that vouch for it, and strict recovery refused the store. Now the reopen writes the
    /// frames no durable LSN covers again and syncs them first. (Failed before the fix:
    /// `corruptFrame` at the second open.)
    @Test func aReopenAfterALostFdatasyncMakesTheUnknownFrameDurableBeforeAppending() throws {
        var generator = BatchGenerator(seed: 9)
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem)
        let acknowledged = (0..<3).map { _ in generator.batch() }
        for batch in acknowledged { try log.append(batch) }
        fileSystem.injectFault(.lostSync, atOperation: fileSystem.operationCount, operations: [.syncData])
        let unknown = generator.batch()
        #expect(throws: WALError.self) { try log.append(unknown) }
        try log.close()

        // The process ends; the kernel keeps the frame in its page cache.
        fileSystem.crash(.keepAll)
        let (reopened, records, _) = try openLog(fileSystem)
        #expect(records.map(\.batch) == acknowledged + [unknown])
        let later = generator.batch()
        try reopened.append(later)
        try reopened.close()

        fileSystem.crash(.dropAll)
        let (after, report) = try readLog(fileSystem)
        #expect(after.map(\.batch) == acknowledged + [unknown, later])
        #expect(report.damage.isEmpty)
    }

    /// Only the frames after the last durable LSN a frame records are written again.
    @Test func aCleanReopenRewritesOnlyTheLastGroup() throws {
        var generator = BatchGenerator(seed: 10)
        let (fileSystem, _) = try writtenLog((0..<20).map { _ in generator.batch() })
        let (_, tail) = try WALReader(files: SegmentFiles(fileSystem: fileSystem, directory: "/db/wal"), mode: .strict)
            .read { _ in }
        #expect(tail.unproven.map(\.lsn) == [LSN(20)])
    }

    /// A bit flip in the salt of the last frame made it look like a frame of an earlier use
    /// of the file: a clean end, no damage reported, an acknowledged batch gone in silence.
    /// (Failed before the fix: the report was empty.)
    @Test func damageInTheLastFramesSaltIsReportedNotAnEnd() throws {
        var generator = BatchGenerator(seed: 11)
        let (fileSystem, records) = try writtenLog((0..<4).map { _ in generator.batch() })
        let last = records[3]
        #expect(fileSystem.modify(last.path) { $0[Int(last.offset) + 5] ^= 0x04 })
        let (after, report) = try readLog(fileSystem)
        #expect(after.count == 3)
        #expect(report.damage.map(\.kind) == [.tornTail])
        #expect(report.damage.first?.offset == last.offset && report.damage.first?.mayHaveLostCommits == true)
    }

    /// A segment shorter than its header says it was made was cut; the frames that were in
    /// its end are gone, and the report says so. (Failed before the fix: a cut through a
    /// frame read as a clean end, with an empty report.)
    @Test func aSegmentCutShortIsToldApartFromATornWrite() throws {
        var generator = BatchGenerator(seed: 12)
        let (fileSystem, records) = try writtenLog((0..<6).map { _ in generator.batch() })
        let cut = Int(records[4].offset) + 20
        #expect(fileSystem.modify(records[4].path) { $0.removeSubrange(cut...) })
        let (after, report) = try readLog(fileSystem)
        #expect(after.count == 4)
        #expect(report.damage.map(\.kind) == [.truncated])
        #expect(report.damage.first?.expectedLSN == LSN(5) && report.damage.first?.offset == Int64(cut))

        // A writer's open reports the same and appends after the cut in a new segment.
        let (reopened, _, openReport) = try openLog(fileSystem)
        #expect(openReport.damage.map(\.kind) == [.truncated])
        try reopened.append(generator.batch())
        try reopened.close()
        let (final, finalReport) = try readLog(fileSystem)
        #expect(final.map(\.lsn) == (1...5).map { LSN(UInt64($0)) })
        #expect(finalReport.damage.isEmpty)
    }

    /// Damage in frames whose batches the data file's checkpoint holds costs nothing: the
    /// log is read past it and the damage is reported as covered. (Failed before the fix:
    /// `corruptFrame`, the store could not be opened.)
    @Test(arguments: [false, true])
    func damageInCheckpointedBatchesIsSteppedOver(inLastFrames: Bool) throws {
        var generator = BatchGenerator(seed: 13)
        let batches = (0..<8).map { _ in generator.batch() }
        let (fileSystem, records) = try writtenLog(batches)
        // Damage the payload of batch 3 (below a checkpoint at 5), or of batch 8 (below one at 8).
        let victim = records[inLastFrames ? 7 : 2]
        #expect(fileSystem.modify(victim.path) { $0[Int(victim.offset) + WALFormat.frameHeaderBytes] ^= 0x20 })
        let checkpoint: UInt64 = inLastFrames ? 8 : 5
        if inLastFrames {
            // Without the checkpoint, damage in the last frame reads as a torn tail that may
            // have cost an acknowledged batch.
            let (plain, plainReport) = try readLog(fileSystem)
            #expect(plain.count == 7 && plainReport.damage.map(\.kind) == [.tornTail])
        } else {
            #expect(throws: WALError.self) { _ = try readLog(fileSystem) }
        }

        var options = WALOptions(segmentBytes: 64 << 10)
        options.replayFrom = LSN(checkpoint + 1)
        let (reopened, replayed, report) = try openLog(fileSystem, options: options)
        #expect(replayed.map(\.batch) == Array(batches[Int(checkpoint)...]))
        #expect(report.damage.map(\.kind) == [.covered])
        #expect(report.damage.first?.mayHaveLostCommits == false)
        let next = generator.batch()
        #expect(try reopened.append(next) == LSN(9))
        try reopened.close()
        let (_, again, _) = try openLog(fileSystem, options: options)
        #expect(again.map(\.batch) == Array(batches[Int(checkpoint)...]) + [next])
    }

    /// R7 across segments: damage in a sealed segment whose batches the checkpoint holds is
    /// read past when the next segment starts at or below the checkpoint + 1. (Without the
    /// checkpoint the later segment makes it corruption.)
    @Test func damageInACheckpointedSealedSegmentIsSteppedOver() throws {
        var generator = BatchGenerator(seed: 17)
        var options = WALOptions(segmentBytes: 4096)
        options.firstSegmentBytes = 4096
        let batches = (0..<12).map { _ in generator.batchOf(bytes: 900) }
        let (fileSystem, records) = try writtenLog(batches, options: options)
        let paths = Array(Set(records.map(\.path))).sorted()
        #expect(paths.count >= 3, "the batches span segments")
        let second = try #require(records.first { $0.path == paths[1] })
        let victim = records[0]
        #expect(fileSystem.modify(victim.path) { $0[Int(victim.offset) + WALFormat.frameHeaderBytes] ^= 0x20 })
        #expect(throws: WALError.self) { _ = try readLog(fileSystem) }
        options.replayFrom = second.lsn
        let (reopened, replayed, report) = try openLog(fileSystem, options: options)
        #expect(replayed.map(\.lsn) == records.filter { $0.lsn >= second.lsn }.map(\.lsn))
        #expect(report.damage.map(\.kind) == [.covered])
        #expect(try reopened.append(generator.batch()) == LSN(13))
        try reopened.close()
    }

    /// A log whose frames end (cleanly, in zeros) below the checkpoint continues at the
    /// checkpoint + 1, never at an LSN the data file already holds. (Before: the next
    /// append took LSN 7, which the next open skipped as checkpointed.)
    @Test func aLogEndingBelowTheCheckpointContinuesAfterIt() throws {
        var generator = BatchGenerator(seed: 18)
        let (fileSystem, records) = try writtenLog((0..<8).map { _ in generator.batch() })
        // The frames of batches 7 and 8 never reached the disk (a relaxed log, say).
        let start = Int(records[6].offset)
        #expect(fileSystem.modify(records[6].path) { $0.replaceSubrange(start..., with: repeatElement(0, count: $0.count - start)) })
        var options = WALOptions(segmentBytes: 64 << 10)
        options.replayFrom = LSN(9)
        let (reopened, replayed, report) = try openLog(fileSystem, options: options)
        #expect(replayed.isEmpty)
        #expect(report.damage.map(\.kind) == [.covered])
        let next = generator.batch()
        #expect(try reopened.append(next) == LSN(9))
        try reopened.close()
        let (_, again, _) = try openLog(fileSystem, options: options)
        #expect(again.map(\.batch) == [next])
    }

    /// Damage that reaches a batch after the checkpoint is still corruption.
    @Test func damageReachingBatchesAfterTheCheckpointIsStillCorruption() throws {
        var generator = BatchGenerator(seed: 14)
        let (fileSystem, records) = try writtenLog((0..<8).map { _ in generator.batch() })
        for victim in records[2...3] {
            #expect(fileSystem.modify(victim.path) { $0[Int(victim.offset) + WALFormat.frameHeaderBytes] ^= 0x20 })
        }
        var options = WALOptions(segmentBytes: 64 << 10)
        options.replayFrom = LSN(4)
        #expect(throws: WALError.self) { _ = try openLog(fileSystem, options: options) }
    }

    /// A first fragment claiming a 256 MiB batch whose other fragments are not there ends
    /// the data as a torn tail (no batch is handed on, nothing is replayed).
    @Test func aFrameClaimingAHugeBatchThatIsNotThereIsATornTail() throws {
        var generator = BatchGenerator(seed: 15)
        let (fileSystem, records) = try writtenLog([generator.batchOf(bytes: 100)])
        let record = records[0]
        #expect(fileSystem.modify(record.path) { bytes in
            let offset = Int(record.offset)
            bytes[offset + 37] = 2 // kind: first fragment
            withUnsafeBytes(of: UInt32(WALFormat.maxBatchBytes).littleEndian) { bytes.replaceSubrange((offset + 32)..<(offset + 36), with: $0) }
            resealFrame(&bytes, at: offset)
        })
        let (after, report) = try readLog(fileSystem)
        #expect(after.isEmpty)
        #expect(report.damage.map(\.kind) == [.tornTail])
    }
}

/// A segment larger than the reader's window is read window by window: every read is
/// bounded, and frames, damage and torn tails across window boundaries read as before.
@Suite struct WALWindowTests {
    private static let options = {
        var options = WALOptions(segmentBytes: 16 << 20)
        options.firstSegmentBytes = 16 << 20
        return options
    }()

    /// 9.6 MiB of frames in one 16 MiB segment: 24 batches of 400 KiB of incompressible values.
    private static func bigSegment() throws -> (SimulatedFileSystem, [WALRecord], [WALBatch]) {
        var generator = BatchGenerator(seed: 16)
        let batches = (0..<24).map { _ in generator.batchOf(bytes: 400 << 10) }
        let (fileSystem, records) = try writtenLog(batches, options: options)
        return (fileSystem, records, batches)
    }

    @Test func aLargeSegmentIsReadInBoundedWindows() throws {
        let (fileSystem, records, batches) = try Self.bigSegment()
        #expect(records.map(\.batch) == batches)
        #expect(Set(records.map(\.path)).count == 1, "one segment")
        let reopen = fileSystem.clone()
        let (_, replayed, _) = try openLog(reopen, options: Self.options)
        #expect(replayed.count == 24)
        #expect(reopen.largestReadBytes <= SegmentWindow.windowBytes,
                "the largest read was \(reopen.largestReadBytes) bytes while recovering a 16 MiB segment")
    }

    @Test func damageAndTornTailsAcrossWindowsAreToldApart() throws {
        let (fileSystem, records, _) = try Self.bigSegment()
        // Damage early: later frames (several windows on) vouch for it: corruption.
        let early = fileSystem.clone()
        #expect(early.modify(records[3].path) { $0[Int(records[3].offset) + 100] ^= 0x01 })
        #expect { _ = try readLog(early) } throws: { error in
            guard case let WALError.corruptFrame(_, offset, lsn, _) = error else { return false }
            return offset == records[3].offset && lsn == LSN(4)
        }
        let (skipped, skipReport) = try readLog(early, mode: .skipCorrupted)
        #expect(skipped.count == 23 && skipReport.damage.map(\.kind) == [.corruption])
        // Damage in the last frame: a torn tail, the 23 before it kept.
        let late = fileSystem.clone()
        #expect(late.modify(records[23].path) { $0[Int(records[23].offset) + 100] ^= 0x01 })
        let (kept, report) = try readLog(late)
        #expect(kept.count == 23 && report.damage.map(\.kind) == [.tornTail])
    }
}

/// A log in `/db/wal` of a new simulated file system holding `batches`, closed, and its
/// records as a reader finds them.
private func writtenLog(_ batches: [WALBatch], options: WALOptions = WALOptions(segmentBytes: 64 << 10))
    throws -> (SimulatedFileSystem, [WALRecord]) {
    let fileSystem = SimulatedFileSystem()
    let (log, _, _) = try openLog(fileSystem, options: options)
    for batch in batches { try log.append(batch) }
    try log.close()
    return (fileSystem, try readLog(fileSystem).0)
}
