import Foundation
import StrataFileIO
import Synchronization
import Testing
@testable import StrataEngine

/// A background checkpoint keeps the committers' priority while commits flow and lowers
/// its own thread's once they stop (`CheckpointPacer`); one that readers or an idle tick
/// started lowers it from its start; a checkpoint on the caller's thread, or one commits
/// may wait for, never does.
@Suite struct CheckpointPacerTests {
    /// A pacer over a publication count and a clock the test moves, and how often it
    /// lowered its thread.
    private final class Harness {
        var publications: UInt64 = 0
        var clock = ContinuousClock.now
        var lowered = 0
        lazy var pacer = CheckpointPacer(publications: { [unowned self] in publications }, yielding: false,
                                         now: { [unowned self] in clock }, lower: { [unowned self] in lowered += 1 })

        func advance(_ duration: Duration, publishing: Bool) {
            clock += duration
            if publishing { publications += 1 }
            pacer.ranOn()
        }
    }

    @Test func aCheckpointKeepsItsPriorityWhileCommitsArePublished() {
        let harness = Harness()
        _ = harness.pacer
        // A commit published between every two runs, for ten times the quiet interval.
        for _ in 0..<100 { harness.advance(CheckpointPacer.quietInterval / 10, publishing: true) }
        #expect(harness.lowered == 0 && !harness.pacer.yielded)
        // Runs close together with no commit, for less than the interval: still none.
        for _ in 0..<9 { harness.advance(CheckpointPacer.quietInterval / 10, publishing: false) }
        #expect(harness.lowered == 0)
    }

    @Test func aCheckpointYieldsOnceTheCommitsStop() {
        let harness = Harness()
        _ = harness.pacer
        harness.advance(.milliseconds(1), publishing: true)
        // The quiet interval counts from the last run that saw a new commit.
        harness.advance(CheckpointPacer.quietInterval - .milliseconds(1), publishing: false)
        #expect(harness.lowered == 0)
        harness.advance(.milliseconds(1), publishing: false)
        #expect(harness.lowered == 1 && harness.pacer.yielded)
        // Once: commits that come back, and quiet after them, lower nothing more.
        harness.advance(.milliseconds(1), publishing: true)
        harness.advance(CheckpointPacer.quietInterval * 2, publishing: false)
        #expect(harness.lowered == 1)
    }

    @Test func aCommitAfterAPauseStartsTheQuietIntervalAgain() {
        let harness = Harness()
        _ = harness.pacer
        harness.advance(CheckpointPacer.quietInterval - .milliseconds(1), publishing: false)
        harness.advance(.milliseconds(2), publishing: true)
        harness.advance(CheckpointPacer.quietInterval - .milliseconds(1), publishing: false)
        #expect(harness.lowered == 0)
        harness.advance(.milliseconds(1), publishing: false)
        #expect(harness.lowered == 1)
    }

    @Test func aCheckpointReadersStartedYieldsFromItsStart() {
        var lowered = 0
        let pacer = CheckpointPacer(publications: { 7 }, yielding: true, lower: { lowered += 1 })
        #expect(lowered == 1 && pacer.yielded)
        pacer.ranOn()
        #expect(lowered == 1)
    }

    /// The tree writer tells its pacer of every run of pages it writes: a checkpoint that
    /// writes on after the commits stop yields within a run of them.
    @Test func theTreeWriterTellsItsPacerOfEveryRun() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/t")
        let pageFile = try PageFile(path: "/t/data", file: try fileSystem.open("/t/data", options: [.create, .write]),
                                    pageBytes: 4096, cachePages: 64)
        // A commit published before every run: the pacer reads the clock once a run.
        var published: UInt64 = 0, clockReads = 0
        let pacer = CheckpointPacer(publications: { published += 1; return published }, yielding: false,
                                    now: { clockReads += 1; return ContinuousClock.now }, lower: {})
        var writer = TreeWriter(file: pageFile, generation: 1, purgeTombstonesThrough: 0,
                                allocator: PageAllocator(reusable: [], pageCount: 2), pacer: pacer)
        let memtable = Memtable()
        memtable.linkReplayed((0..<3_000).map { index in
            (Array("key\(100_000 + index)".utf8), MemtableEntry(version: 1, value: [UInt8](repeating: 7, count: 100)))
        })
        var iterator = memtable.entries(from: nil, reverse: false)
        var nodes: [MemtableNode] = []
        while let node = iterator.nextNode() { nodes.append(node) }
        _ = try withExtendedLifetime(memtable) { try writer.apply(nodes, to: .empty) }
        let pages = Int(writer.allocator.pageCount) - 2
        let runs = clockReads - 1
        let pagesPerRun = TreeWriter.runBytes / 4096
        #expect(pages > pagesPerRun && runs >= (pages + pagesPerRun - 1) / pagesPerRun && runs <= pages,
                "\(runs) runs told of \(pages) pages")
        #expect(!pacer.yielded)
    }

    #if os(Linux)
    /// The call lowers the calling thread alone, by `niceIncrement`.
    @Test func loweringAThreadLowersThatThreadAlone() throws {
        let before = CheckpointPacer.currentThreadNice
        let seen = Mutex<(lowered: Bool, nice: Int)?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let lowered = CheckpointPacer.lowerCurrentThread()
            seen.withLock { $0 = (lowered, CheckpointPacer.currentThreadNice) }
            done.signal()
        }
        done.wait()
        let (lowered, nice) = try #require(seen.withLock { $0 })
        #expect(lowered && nice == min(19, before + Int(CheckpointPacer.niceIncrement)))
        #expect(CheckpointPacer.currentThreadNice == before, "the calling thread was lowered too")
    }
    #endif
}
