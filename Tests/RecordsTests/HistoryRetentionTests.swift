import Foundation
import Strata
import StrataTesting
import Testing

struct Parcel: Record, Equatable {
    var id: Int
    var weight: Int
}

/// History kept across checkpoints and restarts (`WALOptions.history`, FORMAT.md "History"):
/// a consumer of `changes(of:since:)` that was away resumes within the window, and is told
/// (`historyUnavailable`) beyond it.
@Suite struct HistoryRetentionTests {
    static func path() -> String { NSTemporaryDirectory() + "strata-history-\(UUID().uuidString)" }

    /// Small segments, so that checkpoints release some; history kept from the start.
    static func options(_ history: HistoryRetention = HistoryRetention(start: .immediately)) -> EngineOptions {
        var options = EngineOptions()
        options.log.segmentBytes = 64 << 10
        options.log.firstSegmentBytes = 4 << 10
        options.log.history = history
        return options
    }

    /// Twelve rounds of 20 units of work, each round ended by a checkpoint.
    static func fill(_ store: Store, from first: Int = 0) throws {
        for round in 0..<12 {
            for unit in 0..<20 {
                let id = first + round * 20 + unit
                try store.write { try $0.repository(Parcel.self).insert(Parcel(id: id, weight: id % 7)) }
            }
            try store.checkpoint()
        }
    }

    /// Overwrites `bytes` bytes at `offset` of the oldest history segment of the store at
    /// `path` (of at least three); returns its name.
    @discardableResult
    static func damageOldestHistorySegment(of path: String, at offset: UInt64, bytes: Int) throws -> String {
        let history = path + "/wal/history"
        let names = try FileManager.default.contentsOfDirectory(atPath: history).sorted()
        try #require(names.count >= 3, "history segments: \(names)")
        let file = try #require(FileHandle(forUpdatingAtPath: history + "/" + names[0]))
        try file.seek(toOffset: offset)
        file.write(Data(repeating: 0xAB, count: bytes))
        try file.close()
        return names[0]
    }

    static func take(_ count: Int, from feed: RecordChangeFeed<Parcel>) async throws -> [Int] {
        try await firstElements(count, of: feed).map(\.id)
    }

    @Test func changesResumeAcrossCheckpointsAndACleanReopen() async throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let since: UInt64
        do {
            let store = try Store.open(path: path, options: Self.options())
            defer { try? store.close() }
            since = store.version
            try Self.fill(store)
            // The log itself no longer holds the first commits: the history does.
            #expect(store.oldestLoggedVersion > since + 1)
            #expect(try store.oldestHistoryVersion <= since + 1)
            #expect(try await Self.take(240, from: store.changes(of: Parcel.self, since: since)) == Array(0..<240))
        }
        let store = try Store.open(path: path, options: Self.options())
        defer { try? store.close() }
        #expect(try await Self.take(240, from: store.changes(of: Parcel.self, since: since)) == Array(0..<240))
        #expect(try await Self.take(20, from: store.changes(of: Parcel.self, since: since + 100)) == Array(100..<120))
    }

    @Test func beyondTheWindowHistoryIsUnavailableNeverSilent() async throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try Store.open(path: path, options: Self.options(HistoryRetention(versions: 60, bytes: 1 << 30, start: .immediately)))
        defer { try? store.close() }
        let since = store.version
        try Self.fill(store)
        let oldest = try store.oldestHistoryVersion
        // At least the last 60 versions are kept; the first ones are gone.
        #expect(oldest > since + 1 && oldest <= store.version - 59)
        do {
            _ = try store.changes(of: Parcel.self, since: since)
            Issue.record("history beyond the window was read")
        } catch let EngineError.historyUnavailable(requested, reported) {
            #expect(requested == since + 1 && reported == oldest)
        }
        let recent = store.version - 60
        let resumed = try await Self.take(20, from: store.changes(of: Parcel.self, since: recent))
        #expect(resumed.first == Int(recent - since))
        // A bytes limit of nothing keeps nothing; `.none` the same.
        for retention in [HistoryRetention(versions: 1_000_000, bytes: 1, start: .immediately), .none] {
            let other = Self.path()
            defer { try? FileManager.default.removeItem(atPath: other) }
            let small = try Store.open(path: other, options: Self.options(retention))
            defer { try? small.close() }
            try Self.fill(small)
            #expect(throws: EngineError.self) { _ = try small.changes(after: 1) }
        }
    }

    @Test func readingRecentHistoryDoesNotReadOlderSegments() async throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try Store.open(path: path, options: Self.options())
        defer { try? store.close() }
        try Self.fill(store)
        // Damage the oldest kept segment's frames (its header stays): a read from the first
        // version reports the damage, one from a later segment never reads it.
        try Self.damageOldestHistorySegment(of: path, at: 64, bytes: 512)
        #expect(throws: (any Error).self) { _ = try store.changes(after: 1) }
        let late = store.version - 30
        #expect(try await Self.take(10, from: store.changes(of: Parcel.self, since: late)) == Array(210..<220))
    }

    /// By default a store keeps history only from the first change feed opened on it, and
    /// from then on across reopening: a store that never serves one pays nothing.
    @Test func historyIsKeptFromTheFirstChangeFeedOn() async throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let defaults = Self.options(HistoryRetention())
        do {
            let store = try Store.open(path: path, options: defaults)
            defer { try? store.close() }
            try Self.fill(store)
            #expect(!FileManager.default.fileExists(atPath: path + "/wal/history"))
            #expect(throws: EngineError.self) { _ = try store.changes(after: 1) }
            // That feed was a first one: from here on, history is kept.
            let since = store.version
            try Self.fill(store, from: 240)
            #expect(try await Self.take(240, from: store.changes(of: Parcel.self, since: since)) == Array(240..<480))
        }
        let store = try Store.open(path: path, options: defaults)
        defer { try? store.close() }
        let since = store.version
        try Self.fill(store, from: 480)
        #expect(try await Self.take(240, from: store.changes(of: Parcel.self, since: since)) == Array(480..<720))
        #expect(throws: EngineError.self) { _ = try store.changes(after: 1) }
    }

    /// A store reopened with history off drops what it kept, rather than leave a gap a later
    /// feed would read across.
    @Test func turningHistoryOffDropsIt() throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let store = try Store.open(path: path, options: Self.options())
            defer { try? store.close() }
            try Self.fill(store)
        }
        let kept = try FileManager.default.contentsOfDirectory(atPath: path + "/wal/history")
        #expect(!kept.isEmpty)
        let store = try Store.open(path: path, options: Self.options(.none))
        defer { try? store.close() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: path + "/wal/history").isEmpty)
        #expect(throws: EngineError.self) { _ = try store.changes(after: 1) }
    }

    /// A segment a crash left both in the log and in its history (the move's directory syncs
    /// not all done) is read once, from the log; and copies of the store carry no history.
    @Test func aSegmentInBothPlacesIsReadOnceAndCopiesCarryNoHistory() async throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let store = try Store.open(path: path, options: Self.options())
            defer { try? store.close() }
            try Self.fill(store)
            for unit in 0..<5 { try await store.write { try $0.repository(Parcel.self).insert(Parcel(id: 240 + unit, weight: 1)) } }
        }
        // The newest history segment, back in the log under its name, as a crash can leave it.
        let history = path + "/wal/history"
        let newest = try #require(try FileManager.default.contentsOfDirectory(atPath: history).sorted().last)
        try FileManager.default.copyItem(atPath: history + "/" + newest, toPath: path + "/wal/" + newest)
        let store = try Store.open(path: path, options: Self.options())
        defer { try? store.close() }
        let oldest = try store.oldestHistoryVersion
        let versions = try await firstElements(Int(store.version - oldest + 1), of: store.changes(after: oldest - 1)).map(\.version)
        #expect(versions == Array(oldest...store.version))
        let copy = Self.path(), compacted = Self.path()
        defer {
            try? FileManager.default.removeItem(atPath: copy)
            try? FileManager.default.removeItem(atPath: compacted)
        }
        try store.backup(to: copy)
        try store.compact(to: compacted)
        for destination in [copy, compacted] {
            let carried = (try? FileManager.default.contentsOfDirectory(atPath: destination + "/wal/history")) ?? []
            #expect(carried.isEmpty, "\(destination): \(carried)")
            let reopened = try Store.open(path: destination, mode: .readOnly)
            #expect(try await reopened.read { try $0.repository(Parcel.self).count() } == 245)
            try reopened.close()
        }
    }

    /// A history segment whose header is damaged is reported to a reader by name, and does
    /// not stop the checkpoints that prune history: the next one removes it.
    @Test func aDamagedHistoryHeaderIsNamedAndPrunedNotFatal() async throws {
        let path = Self.path()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try Store.open(path: path, options: Self.options())
        defer { try? store.close() }
        try Self.fill(store)
        let history = path + "/wal/history"
        let oldest = try Self.damageOldestHistorySegment(of: path, at: 0, bytes: 64)
        #expect { _ = try store.changes(after: 1) } throws: { "\($0)".contains(oldest) }
        // Checkpoints go on, and the damaged segment goes with the next one.
        try Self.fill(store, from: 240)
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: history)).contains(oldest))
        let since = store.version - 20
        #expect(try await Self.take(20, from: store.changes(of: Parcel.self, since: since)) == Array(460..<480))
    }
}
