// Readers in processes of their own beside a writer process (Tests/ReaderBankProcess):
// every read sees the bank's invariant at one version, versions never go backwards, a
// backup of the live store holds every transfer acknowledged before it began, and
// readers and writers killed at random lose nothing acknowledged and pin nothing once dead.
import Foundation
import Strata
import StrataTesting
import TestBackends
import Testing

@Suite(.serialized) struct ReaderProcessTests {
    static let executable = builtExecutable("ReaderBankProcess")
    static let total = 20 * 1_000

    func start(_ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = arguments
        try process.run()
        return process
    }

    func scratch() throws -> (directory: String, store: String, log: String) {
        let directory = NSTemporaryDirectory() + "strata-reader-bank-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let log = directory + "/log"
        #expect(FileManager.default.createFile(atPath: log, contents: nil))
        return (directory, directory + "/store", log)
    }

    func lines(_ log: String) throws -> [Substring] {
        try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
    }

    /// The last version the writer logged as acknowledged.
    func lastAcknowledged(_ log: String) throws -> UInt64 {
        try lines(log).last { $0.hasPrefix("A ") }.flatMap { UInt64($0.dropFirst(2)) } ?? 0
    }

    func waitForLine(_ log: String, _ prefix: String, seconds: Double = 60) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while try !lines(log).contains(where: { $0.hasPrefix(prefix) }) {
            try #require(Date() < deadline, "no \(prefix) line in \(log)")
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    /// The sum of every account, the transfers counted, and the store's version.
    func audit(_ store: Store) throws -> (sum: Int, version: UInt64) {
        try store.read { context in
            var sum = 0
            for account in 0..<20 {
                sum += try context.get(Array("account\(account)".utf8))
                    .map { Int($0.withUnsafeBytes { $0.loadUnaligned(as: Int64.self) }) } ?? 0
            }
            return (sum, context.version)
        }
    }

    @Test func readerProcessesSeeTheInvariantBesideAWriterAndABackupHoldsWhatWasAcknowledged() throws {
        let (directory, store, log) = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let writer = try start(["writer", store, log, "60"])
        defer { if writer.isRunning { kill(writer.processIdentifier, SIGKILL) } }
        try waitForLine(log, "opened")
        try waitForLine(log, "A ")
        let readers = try (0..<4).map { _ in try start(["reader", store, log, "3000"]) }
        // A backup of the live store while the readers read.
        let acknowledged = try lastAcknowledged(log)
        let copy = directory + "/copy"
        let backup = try start(["backup", store, log, copy])
        backup.waitUntilExit()
        #expect(backup.terminationStatus == 0)
        for reader in readers {
            reader.waitUntilExit()
            #expect(reader.terminationStatus == 0)
        }
        kill(writer.processIdentifier, SIGKILL)
        writer.waitUntilExit()
        let text = try lines(log)
        #expect(!text.contains { $0.hasPrefix("BAD") || $0.hasPrefix("ERROR") }, "\(text.filter { $0.hasPrefix("BAD") || $0.hasPrefix("ERROR") })")
        let summaries = text.filter { $0.hasPrefix("R ") }.map { $0.split(separator: " ").compactMap { UInt64($0) } }
        #expect(summaries.count == 4)
        // Each reader followed the writer: it saw many versions, in order.
        for summary in summaries { #expect(summary.count == 3 && summary[1] > summary[0] && summary[2] > 10, "\(summary)") }
        let (copied, report) = try (Store.open(path: copy, mode: .readOnly), 0)
        _ = report
        #expect(copied.verify().isValid)
        let (sum, version) = try audit(copied)
        #expect(sum == Self.total)
        #expect(version >= acknowledged)
        #expect(text.contains { $0 == "B \(version)" })
        try copied.close()
        // The store itself: sound, every acknowledged transfer in it.
        let reopened = try Store.open(path: store)
        #expect(reopened.verify().isValid)
        #expect(try audit(reopened).sum == Self.total)
        #expect(reopened.version >= (try lastAcknowledged(log)))
        #expect(try reopened.status().readers.isEmpty)
        try reopened.close()
    }

    @Test func killedReadersAndWritersLoseNothingAndDeadReadersPinNothing() throws {
        let seed = UInt64.random(in: 1...UInt64(UInt32.max))
        print("ReaderProcessTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        let (directory, store, log) = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var running: [Process] = []
        defer { for process in running where process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let cycles = 24
        for cycle in 0..<cycles {
            let writer = try start(["writer", store, log])
            let readers = try (0..<2).map { _ in try start(["reader", store, log, "100000"]) }
            running = [writer] + readers
            Thread.sleep(forTimeInterval: 0.2 + Double(random.next() % 500) / 1000)
            // The writer, or the readers, or all of them, die at once.
            let victims: [Process] = switch cycle % 3 {
            case 0: [writer] + readers
            case 1: readers + [writer]
            default: [writer]
            }
            for process in victims { kill(process.processIdentifier, SIGKILL) }
            for process in running where !victims.contains(where: { $0 === process }) {
                kill(process.processIdentifier, SIGKILL)
            }
            for process in running { process.waitUntilExit() }
        }
        let text = try lines(log)
        #expect(!text.contains { $0.hasPrefix("BAD") }, "\(text.filter { $0.hasPrefix("BAD") })")
        // The readers did read beside the writers (most opened before they were killed).
        #expect(text.filter { $0 == "reading" }.count >= cycles)
        let reopened = try Store.open(path: store)
        // Dead readers hold no slot, and the next checkpoint reuses what they pinned.
        #expect(try reopened.status().readers.isEmpty)
        try reopened.write { unit in try unit.put(Array("after".utf8), [1]) }
        try reopened.checkpoint()
        #expect(try reopened.status().pagesHeldForReaders == 0)
        #expect(reopened.verify().isValid)
        #expect(try audit(reopened).sum == Self.total)
        #expect(reopened.version >= (try lastAcknowledged(log)))
        try reopened.close()
    }
}
