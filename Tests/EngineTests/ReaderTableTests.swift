import Foundation
import StrataFileIO
import Synchronization
import Testing
import StrataWAL
@testable import StrataEngine

/// Read-only stores beside a writer (ReaderTable.swift): in one process here, through the
/// same reader table other processes use (the multi-process bank is in ReaderProcessTests).
@Suite struct ReaderTableTests {
    private func put(_ engine: StorageEngine, _ key: String, _ value: String) throws {
        try engine.commit(WALBatch([.put(key: Array(key.utf8), value: Array(value.utf8))]))
    }

    private func text(_ snapshot: Snapshot, _ key: String) throws -> String? {
        try snapshot.get(Array(key.utf8)).map { String(decoding: $0, as: UTF8.self) }
    }

    private func temporaryStore() -> (directory: String, store: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-readers-\(UUID().uuidString)").path
        return (directory, directory + "/s")
    }

    @Test func aReaderBesideAWriterFollowsItsCommitsAndKeepsItsSnapshots() throws {
        let fileSystem = SimulatedFileSystem()
        let (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        try put(writer, "k", "1")
        let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem)
        let first = reader.snapshot()
        #expect(try text(first, "k") == "1")
        try put(writer, "k", "2")
        // A new snapshot moves to the writer's newest durable version; the old one stays.
        #expect(try text(reader.snapshot(), "k") == "2")
        #expect(try text(first, "k") == "1")
        // Across checkpoints (a new tree, the log released behind it).
        try writer.checkpoint()
        try put(writer, "k", "3")
        try writer.checkpoint()
        try put(writer, "j", "4")
        let latest = reader.snapshot()
        #expect(try text(latest, "k") == "3" && text(latest, "j") == "4")
        #expect(latest.version == writer.version)
        #expect(try text(first, "k") == "1")
        #expect(writer.readers.count == 1 && writer.readers.first?.process == ProcessInfo.processInfo.processIdentifier)
        #expect(throws: EngineError.self) { try put(reader, "x", "y") }
        try reader.close()
        #expect(writer.readers.isEmpty)
        try writer.close()
    }

    /// A reader that moves to a newer tree keeps the changes it read (its active memtable
    /// becomes the frozen one) when they cover what the tree lacks, and reads the tree and
    /// its log afresh when they do not (it fell two checkpoints behind): either way every
    /// key reads as the writer wrote it, by key and in order, deletes included.
    /// With `compressed`, the writer stores leaves LZ4-compressed (values padded with one
    /// repeated letter), which the reader expands into its page cache: moving to a newer
    /// tree must not serve an expansion of a page the writer has since rewritten. With
    /// `large`, on the real file system (the data file mapped), one value in five is too
    /// large for a leaf: the reader reads the runs the writer writes, frees and writes over
    /// again, in place through its own mapping of the growing file.
    @Test(arguments: [(false, false), (true, false), (false, true)])
    func aReaderMovingToANewerTreeReadsWhatTheWriterWrote(compressed: Bool, large: Bool) throws {
        let seed: UInt64 = 0x5EED_0042
        print("aReaderMovingToANewerTreeReadsWhatTheWriterWrote seed \(seed)")
        var random = SplitMix64(seed: seed)
        let (directory, path) = large ? temporaryStore() : ("", "/db")
        defer { if large { try? FileManager.default.removeItem(atPath: directory) } }
        let fileSystem: any FileSystem = large ? POSIXFileSystem() : SimulatedFileSystem()
        var options = EngineOptions()
        if compressed { options.leafCompression = .lz4 }
        let padding = compressed ? String(repeating: "p", count: 60) : ""
        let (writer, _) = try StorageEngine.open(path: path, fileSystem: fileSystem, options: options)
        var compressedTrees = 0
        var overflowTrees = 0
        let (reader, _) = try StorageEngine.open(path: path, mode: .readOnly, fileSystem: fileSystem)
        var model: [String: String] = [:]
        var kept = 0
        var reloaded = 0
        for round in 0..<60 {
            var batch = WALBatch()
            for _ in 0..<(1 + Int(random.next() % 40)) {
                let key = "key\(random.next() % 500)"
                if random.next() % 5 == 0 {
                    batch.delete(Array(key.utf8))
                    model[key] = nil
                } else {
                    let long = large && random.next() % 5 == 0 ? String(repeating: "\(round % 10)", count: 3_000 + Int(random.next() % 6_000)) : ""
                    let value = "r\(round)-\(random.next() % 1_000)" + padding + long
                    batch.put(Array(key.utf8), Array(value.utf8))
                    model[key] = value
                }
            }
            try writer.commit(batch)
            // Every third round a checkpoint: mostly with the reader at the checkpoint's
            // version (it read the log before the checkpoint released it), every ninth two,
            // the reader reading neither (the log it would need is gone).
            let checkpoints = round % 3 == 0 ? (round % 9 == 0 ? 2 : 1) : 0
            if checkpoints == 1 { _ = reader.snapshot() }
            let generation = reader.snapshots.current.treeGeneration
            for _ in 0..<checkpoints {
                try writer.checkpoint()
                let report = writer.verify()
                if report.compressedLeafPages > 0 { compressedTrees += 1 }
                if report.overflowPages > 0 { overflowTrees += 1 }
                try writer.commit(WALBatch([.put(key: Array("count".utf8), value: Array("\(round)".utf8))]))
                model["count"] = "\(round)"
            }
            let snapshot = reader.snapshot()
            #expect(snapshot.version == writer.version, "round \(round)")
            if checkpoints > 0 {
                let moved = reader.snapshots.current
                #expect(moved.treeGeneration > generation, "round \(round)")
                if moved.frozen != nil { kept += 1 } else { reloaded += 1 }
            }
            for key in (0..<500).map({ "key\($0)" }) + ["count"] {
                #expect(try text(snapshot, key) == model[key], "round \(round), \(key)")
            }
            let scanned = try snapshot.scan().map { (String(decoding: $0.key, as: UTF8.self), String(decoding: $0.value, as: UTF8.self)) }
            #expect(scanned.map(\.0) == model.keys.sorted() && scanned.allSatisfy { model[$0.0] == $0.1 }, "round \(round)")
        }
        // Both ways of moving ran.
        #expect(kept > 5 && reloaded > 0, "kept \(kept), reloaded \(reloaded)")
        #expect(compressed ? compressedTrees > 10 : compressedTrees == 0, "\(compressedTrees) trees held compressed leaves")
        #expect(large ? overflowTrees > 10 : overflowTrees == 0, "\(overflowTrees) trees held overflow runs")
        try reader.close()
        try writer.close()
    }

    /// A snapshot of a reader pins its tree: checkpoints that rewrite every key go on
    /// reusing freed pages, never this tree's, and the snapshot reads what it read.
    @Test(arguments: [false, true])
    func aReadersOldSnapshotSurvivesCheckpointsThatReuseFreedPages(onDisk: Bool) throws {
        let (directory, path) = onDisk ? temporaryStore() : ("", "/db")
        defer { if onDisk { try? FileManager.default.removeItem(atPath: directory) } }
        let fileSystem: any FileSystem = onDisk ? POSIXFileSystem() : SimulatedFileSystem()
        let (writer, _) = try StorageEngine.open(path: path, fileSystem: fileSystem)
        func rewriteAll(_ round: Int) throws {
            var batch = WALBatch()
            for index in 0..<3_000 { batch.put(Array("key\(index)".utf8), Array("round \(round) of \(index) ".utf8) + [UInt8](repeating: UInt8(round), count: 60)) }
            try writer.commit(batch)
            try writer.checkpoint()
        }
        try rewriteAll(0)
        let (reader, _) = try StorageEngine.open(path: path, mode: .readOnly, fileSystem: fileSystem)
        do {
            let pinned = reader.snapshot()
            let expected = try pinned.scan().map { $0.key + [0] + $0.value }
            #expect(expected.count == 3_000)
            for round in 1...6 { try rewriteAll(round) }
            #expect(try pinned.scan().map { $0.key + [0] + $0.value } == expected)
            #expect(reader.verify().isValid)
            #expect(try #require(writer.readerTable).pinnedPages > 0)
        }
        // Once the snapshot ends, a reader that keeps up (each snapshot moves it to the
        // newest version) pins only the tree it reads: the pages come back and the file
        // stops growing.
        let pagesWhilePinned = writer.checkpointLock.withLock { $0.meta.pageCount }
        for round in 7...12 {
            _ = reader.snapshot()
            try rewriteAll(round)
        }
        #expect(writer.checkpointLock.withLock { $0.meta.pageCount } <= pagesWhilePinned + 4)
        #expect(try text(reader.snapshot(), "key7")?.hasPrefix("round 12") == true)
        try reader.close()
        try writer.close()
        #expect(try StorageEngine.open(path: path, fileSystem: fileSystem).engine.verify().isValid)
    }

    /// A reader whose process died holds its slot's lock no more: the writer clears the
    /// slot and reuses what it pinned.
    @Test func aDeadReadersSlotIsClearedAndPinsNothing() throws {
        let fileSystem = SimulatedFileSystem()
        let (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        try put(writer, "k", "1")
        try writer.checkpoint()
        let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem)
        _ = reader.snapshot()
        #expect(writer.readerPins().generation == 1)
        // What a process's death does: its openings close, its slot's words stay.
        try #require(reader.readerTable).file.close()
        #expect(writer.readerPins().generation == nil)
        #expect(writer.readers.isEmpty)
    }

    /// A shrinking close moves no page and cuts nothing while a reader is open (FORMAT.md,
    /// "Reader table"): the reader reads every key after the close, and the file keeps its
    /// length. Once no reader is open, the next close gives the free pages back.
    @Test func aClosingWriterShrinksNothingUnderAReader() throws {
        let fileSystem = SimulatedFileSystem()
        func dataBytes() throws -> Int64 { try fileSystem.open("/db/data", options: []).size() }
        var (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        var batch = WALBatch()
        for index in 0..<4_000 { batch.put(Array("key\(index)".utf8), [UInt8](repeating: UInt8(index % 251), count: 200)) }
        try writer.commit(batch)
        try writer.checkpoint()
        // Most pages become free: a close would move what is left and cut the file.
        var deletes = WALBatch()
        for index in 100..<4_000 { deletes.delete(Array("key\(index)".utf8)) }
        try writer.commit(deletes)
        try writer.checkpoint()
        let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem)
        let snapshot = reader.snapshot()
        try put(writer, "last", "1")
        let before = try dataBytes()
        try writer.close()
        #expect(try dataBytes() == before)
        for index in 0..<100 { #expect(try snapshot.get(Array("key\(index)".utf8))?.count == 200) }
        #expect(try text(reader.snapshot(), "last") == "1")
        try reader.close()
        (writer, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        try put(writer, "after", "2")
        try writer.close()
        #expect(try dataBytes() < before / 2)
    }

    /// A close's move of pages and a reader's pin-and-recheck exclude each other (byte 0 of
    /// `readers`, exclusive for the close, shared for readers): a reader that comes while
    /// the close holds it waits until the close is done, and readers do not wait for each other.
    @Test func aClosesMoveAndAReadersPinExcludeEachOther() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/db")
        let closing = try ReaderTable.open(directory: "/db", fileSystem: fileSystem)
        let reading = try ReaderTable.open(directory: "/db", fileSystem: fileSystem)
        let other = try ReaderTable.open(directory: "/db", fileSystem: fileSystem)
        let events = Mutex<[String]>([])
        let inside = DispatchSemaphore(value: 0)
        let leave = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? closing.excludingPinningReaders {
                events.withLock { $0.append("close in") }
                inside.signal()
                leave.wait()
                events.withLock { $0.append("close out") }
            }
            done.signal()
        }
        inside.wait()
        Thread.detachNewThread {
            _ = try? reading.pinning { events.withLock { $0.append("pin") } }
            done.signal()
        }
        // The reader is kept waiting while the close holds the byte.
        Thread.sleep(forTimeInterval: 0.2)
        #expect(events.withLock { $0 } == ["close in"])
        leave.signal()
        done.wait()
        done.wait()
        #expect(events.withLock { $0 } == ["close in", "close out", "pin"])
        // Two readers pin side by side.
        let sideBySide = try reading.pinning { try other.pinning { true } }
        #expect(sideBySide)
    }

    /// `readers` is bytes from disk like any other (FORMAT.md, "Reader table"): a file of
    /// another magic is laid out anew, a newer layout is refused naming it, a symbolic link
    /// or a directory in its place is an error naming the path, and a live slot holding
    /// extreme words (generation and LSN 0) costs the writer space, never a trap.
    @Test func aHostileReaderTableIsLaidOutAnewRefusedOrHarmless() throws {
        let (directory, path) = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (writer, _) = try StorageEngine.open(path: path)
        try put(writer, "k", "1")
        try writer.close()
        let tablePath = path + "/readers"
        // Garbage: laid out anew, and the store opens both ways.
        try Data(repeating: 0xA5, count: 8192).write(to: URL(fileURLWithPath: tablePath))
        let (reader, _) = try StorageEngine.open(path: path, mode: .readOnly)
        #expect(try text(reader.snapshot(), "k") == "1")
        try reader.close()
        #expect(try Data(contentsOf: URL(fileURLWithPath: tablePath)).prefix(8) == Data("STRATARD".utf8))
        // A newer layout version (the high half of the word at 8).
        var newer = try Data(contentsOf: URL(fileURLWithPath: tablePath))
        newer[12] = 2
        try newer.write(to: URL(fileURLWithPath: tablePath))
        for mode in [AccessMode.readWrite, .readOnly] {
            #expect { try StorageEngine.open(path: path, mode: mode) } throws: { error in
                guard case let EngineError.unsupportedVersion(file, found, supported) = error else { return false }
                return file == tablePath && found == 2 && supported == 1
            }
        }
        // A symbolic link or a directory in its place.
        try FileManager.default.removeItem(atPath: tablePath)
        try FileManager.default.createSymbolicLink(atPath: tablePath, withDestinationPath: directory + "/elsewhere")
        #expect { try StorageEngine.open(path: path) } throws: { error in
            guard case let EngineError.io(cause) = error else { return false }
            return "\(cause)".contains(tablePath)
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/elsewhere"))
        try FileManager.default.removeItem(atPath: tablePath)
        try FileManager.default.createDirectory(atPath: tablePath, withIntermediateDirectories: false)
        #expect { try StorageEngine.open(path: path, mode: .readOnly) } throws: { error in
            guard case let EngineError.io(cause) = error else { return false }
            return "\(cause)".contains(tablePath)
        }
        try FileManager.default.removeItem(atPath: tablePath)
        // A live slot whose words are all zero (pid aside): it pins generation 0 and LSN 0.
        let (again, _) = try StorageEngine.open(path: path)
        let table = try ReaderTable.open(directory: path, fileSystem: POSIXFileSystem())
        let slot = try table.claimSlot()
        slot.pin(generation: 0, logFrom: 0, version: 0)
        try put(again, "k", "2")
        try again.checkpoint()
        #expect(again.readers.count == 1 && again.readers[0].generation == 0)
        #expect(try text(again.snapshot(), "k") == "2")
        slot.release()
        try again.close()
    }

    /// Every slot held: the next reader is refused with the limit and what to do.
    @Test func theReaderTableHoldsItsSlotsAndNoMore() throws {
        let fileSystem = SimulatedFileSystem()
        try StorageEngine.open(path: "/db", fileSystem: fileSystem).engine.close()
        let tables = try (0..<ReaderTable.slotCount).map { _ in try ReaderTable.open(directory: "/db", fileSystem: fileSystem) }
        let slots = try tables.map { try $0.claimSlot() }
        #expect(Set(slots.map(\.slot)).count == 127)
        #expect { try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem) } throws: { error in
            guard case let EngineError.tooManyReaders(path, limit) = error else { return false }
            return path == "/db/readers" && limit == 127 && "\(error)".contains("close some")
        }
        slots[0].release()
        let (reader, _) = try StorageEngine.open(path: "/db", mode: .readOnly, fileSystem: fileSystem)
        #expect(reader.readerSlot?.slot == 0)
        try reader.close()
        withExtendedLifetime(slots) {}
    }

    /// A writer that opens while a reader (of a process that outlived the last writer)
    /// reads an older tree reuses none of the free list until that reader moves on.
    @Test func aNewWriterRespectsAReaderOfAnOlderTree() throws {
        let (directory, path) = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var (writer, _) = try StorageEngine.open(path: path)
        func rewriteAll(_ round: Int) throws {
            var batch = WALBatch()
            for index in 0..<2_000 { batch.put(Array("key\(index)".utf8), Array("round \(round) ".utf8) + [UInt8](repeating: 1, count: 80)) }
            try writer.commit(batch)
            try writer.checkpoint()
        }
        try rewriteAll(0)
        let (reader, _) = try StorageEngine.open(path: path, mode: .readOnly)
        let pinned = reader.snapshot()
        let expected = try pinned.scan().map { $0.key + [0] + $0.value }
        try rewriteAll(1)
        try writer.close()
        (writer, _) = try StorageEngine.open(path: path)
        #expect(writer.checkpointLock.withLock { $0.reusable.isEmpty && !$0.pending.isEmpty })
        for round in 2...5 { try rewriteAll(round) }
        #expect(try pinned.scan().map { $0.key + [0] + $0.value } == expected)
        try reader.close()
        try writer.close()
    }

    /// Readers in threads of their own, each through its own read-only store, read the sum
    /// of the accounts while a writer moves money and checkpoints every 40 transfers:
    /// every read sees the invariant and versions never go backwards.
    @Test func readersSeeOneConsistentVersionWhileTheWriterCheckpoints() throws {
        let (directory, path) = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let accounts = 20
        let options = {
            var options = EngineOptions()
            options.checkpointLogBytes = 64 << 10
            options.log.segmentBytes = 64 << 10
            return options
        }()
        let (writer, _) = try StorageEngine.open(path: path, options: options)
        @Sendable func key(_ account: Int) -> [UInt8] { Array("account\(account)".utf8) }
        @Sendable func encode(_ value: Int) -> [UInt8] { withUnsafeBytes(of: Int64(value).littleEndian) { Array($0) } }
        @Sendable func decode(_ bytes: [UInt8]) -> Int { Int(bytes.withUnsafeBytes { $0.loadUnaligned(as: Int64.self) }) }
        try writer.commit(WALBatch((0..<accounts).map { .put(key: key($0), value: encode(100)) }))
        let seed = UInt64.random(in: 0...UInt64.max)
        print("readersSeeOneConsistentVersionWhileTheWriterCheckpoints seed \(seed)")
        let done = ManagedFlag()
        let failures = Failures()
        let readers = (0..<3).map { index in
            Thread.detachedRun {
                do {
                    let (reader, _) = try StorageEngine.open(path: path, mode: .readOnly, options: options)
                    defer { try? reader.close() }
                    var lastVersion: UInt64 = 0
                    var reads = 0
                    while !done.isSet || reads < 50 {
                        let snapshot = reader.snapshot()
                        var sum = 0
                        for account in 0..<accounts { sum += try snapshot.get(key(account)).map(decode) ?? 0 }
                        if sum != accounts * 100 { failures.add("reader \(index) saw \(sum) at version \(snapshot.version)") }
                        if snapshot.version < lastVersion {
                            failures.add("reader \(index) went back from \(lastVersion) to \(snapshot.version)")
                        }
                        lastVersion = snapshot.version
                        reads += 1
                    }
                } catch {
                    failures.add("reader \(index): \(error)")
                }
            }
        }
        var generator = SplitMix64(seed: seed)
        // Every 40th transfer checkpoints first, whether or not it moves money (a skipped
        // transfer used to skip its checkpoint too: seed 1628901763388520944 made 30 of 37).
        let transfers = 1_500, checkpoints = UInt64(transfers / 40)
        for transfer in 0..<transfers {
            if transfer % 40 == 39 { try writer.checkpoint() }
            let from = Int(generator.next() % UInt64(accounts)), to = Int(generator.next() % UInt64(accounts))
            let snapshot = writer.snapshot()
            let amount = Int(generator.next() % 10)
            let fromBalance = try snapshot.get(key(from)).map(decode) ?? 0
            guard from != to, fromBalance >= amount else { continue }
            let toBalance = try snapshot.get(key(to)).map(decode) ?? 0
            try writer.commit(WALBatch([.put(key: key(from), value: encode(fromBalance - amount)),
                                        .put(key: key(to), value: encode(toBalance + amount))]))
        }
        done.set()
        for reader in readers { reader.wait() }
        #expect(failures.all.isEmpty, "\(failures.all.prefix(5))")
        // Each checkpoint wrote the data file once more: its generation counts them all.
        #expect(writer.checkpointLock.withLock { $0.meta.generation } >= checkpoints)
        try writer.close()
    }

    /// A backup made by a reader while the writer commits: the copy verifies and holds
    /// every commit acknowledged before it began, at the reader's version.
    @Test func aReadersBackupOfALiveStoreIsConsistent() throws {
        let (directory, path) = temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = EngineOptions()
        options.checkpointLogBytes = 256 << 10
        let (writer, _) = try StorageEngine.open(path: path, options: options)
        for index in 0..<3_000 { try put(writer, "key\(index)", String(repeating: "v", count: index % 200)) }
        let acknowledged = writer.version
        let stop = ManagedFlag()
        let background = Thread.detachedRun {
            var index = 3_000
            while !stop.isSet {
                try? self.put(writer, "key\(index)", "later")
                if index % 500 == 0 { try? writer.checkpoint() }
                index += 1
            }
        }
        let (reader, _) = try StorageEngine.open(path: path, mode: .readOnly)
        let copy = directory + "/copy"
        let report = try reader.backup(to: copy)
        stop.set()
        background.wait()
        #expect(report.version >= acknowledged)
        try reader.close()
        try writer.close()
        let (restored, restoredReport) = try StorageEngine.open(path: copy, mode: .readOnly)
        #expect(restored.verify().isValid)
        #expect(restoredReport.log.damage.isEmpty)
        #expect(restored.version == report.version)
        let snapshot = restored.snapshot()
        for index in stride(from: 0, to: 3_000, by: 7) {
            #expect(try text(snapshot, "key\(index)") == String(repeating: "v", count: index % 200))
        }
        try restored.close()
    }
}

/// A flag set once, read from any thread.
final class ManagedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}

/// Failures gathered from threads.
final class Failures: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ item: String) { lock.withLock { items.append(item) } }
    var all: [String] { lock.withLock { items } }
}

/// A thread to wait for.
final class DetachedRun: @unchecked Sendable {
    private let finished = DispatchSemaphore(value: 0)
    fileprivate init() {}
    fileprivate func finish() { finished.signal() }
    func wait() { finished.wait() }
}

extension Thread {
    static func detachedRun(_ body: @escaping @Sendable () -> Void) -> DetachedRun {
        let run = DetachedRun()
        Thread.detachNewThread {
            body()
            run.finish()
        }
        return run
    }
}
