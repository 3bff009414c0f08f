import Foundation
import StrataFileIO
import Synchronization
import Testing
@testable import StrataEngine

/// A background checkpoint's writes keep the committers' priority while commits come and
/// lower their thread's once they stop (`CheckpointPacer`); those of a checkpoint readers
/// or an idle tick started lower it from their start; a checkpoint on the caller's thread,
/// or one commits may wait for, never does.
@Suite struct CheckpointPacerTests {
    /// A pacer over the last commit's version and a clock the test moves, and how often it
    /// lowered its thread.
    private final class Harness {
        var commits: UInt64 = 0
        var clock = ContinuousClock.now
        var lowered = 0
        lazy var pacer = CheckpointPacer(commits: { [unowned self] in commits }, yielding: false,
                                         now: { [unowned self] in clock }, lower: { [unowned self] in lowered += 1 })

        func advance(_ duration: Duration, publishing: Bool) {
            clock += duration
            if publishing { commits += 1 }
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

    /// Lowered on the writes' thread as they begin, not where the pacer is made.
    @Test func aCheckpointReadersStartedYieldsFromItsStart() {
        var lowered = 0
        let pacer = CheckpointPacer(commits: { 7 }, yielding: true, lower: { lowered += 1 })
        #expect(lowered == 0 && !pacer.yielded)
        pacer.begin()
        #expect(lowered == 1 && pacer.yielded)
        pacer.begin()
        pacer.ranOn()
        #expect(lowered == 1)
    }

    /// The writes' thread is a thread of its own: the value goes there and back, what the
    /// body throws is rethrown, and lowering that thread leaves the caller's alone.
    @Test func theWritesRunOnAThreadOfTheirOwn() throws {
        let nice = CheckpointPacer.currentThreadNice
        var value = [1, 2, 3]
        let caller = Thread.current
        let (sum, elsewhere) = try CheckpointPacer.onThreadOfItsOwn(&value) { value in
            _ = CheckpointPacer.lowerCurrentThread()
            value.append(4)
            return (value.reduce(0, +), Thread.current != caller)
        }
        #expect(value == [1, 2, 3, 4] && sum == 10 && elsewhere)
        #expect(CheckpointPacer.currentThreadNice == nice)
        struct Refused: Error {}
        #expect(throws: Refused.self) {
            try CheckpointPacer.onThreadOfItsOwn(&value) { _ -> Int in throw Refused() }
        }
    }

    /// The tree writer tells its pacer of every run of pages it writes: a checkpoint that
    /// writes on after the commits stop yields within a run of them.
    @Test func theTreeWriterTellsItsPacerOfEveryRun() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/t")
        let pageFile = try PageFile(path: "/t/data", file: try fileSystem.open("/t/data", options: [.create, .write]),
                                    pageBytes: 4096, cachePages: 64)
        // A commit enqueued before every run: the pacer reads the clock once a run.
        var enqueued: UInt64 = 0, clockReads = 0
        let pacer = CheckpointPacer(commits: { enqueued += 1; return enqueued }, yielding: false,
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
