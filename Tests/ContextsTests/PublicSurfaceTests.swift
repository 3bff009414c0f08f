// The surface an application meets: units of work from the main actor and from actors,
// errors as the body threw them, messages that read as sentences, short reflection.
import Strata
import StrataTesting
import Testing

private struct TitleTaken: Error, Equatable {
    let title: String
}

@MainActor
private final class MainActorModel {
    let store: Store
    var pending = ["a", "b"]
    var saves = 0

    init(store: Store) { self.store = store }

    func save() async throws -> Int {
        try await store.write { unit in
            MainActor.assertIsolated()
            for title in self.pending { try unit.put(bytes("todo/\(title)"), bytes(title)) }
            self.saves += 1
            return try unit.scan(prefix: bytes("todo/")).count
        }
    }

    func saveRefusing(_ title: String) async throws {
        try await store.write { unit in
            try unit.put(bytes("todo/\(title)"), bytes(title))
            self.saves += 1
            throw TitleTaken(title: title)
        }
    }
}

private actor Counter {
    let store: Store
    var imported = 0

    init(store: Store) { self.store = store }

    func importAll(_ titles: [String]) async throws -> Int {
        try await store.write { unit in
            self.assertIsolated()
            for title in titles {
                try await unit.child { nested in try nested.put(bytes("todo/\(title)"), bytes(title)) }
                self.imported += 1
            }
            return self.imported
        }
    }
}

@Suite struct PublicSurfaceTests {
    @MainActor @Test func aMainActorModelRunsUnitsOfWorkOnItsOwnState() async throws {
        let store = try Store.inMemory()
        let model = MainActorModel(store: store)
        #expect(try await model.save() == 2)
        #expect(model.saves == 1)
        let version = store.version
        await #expect(throws: TitleTaken(title: "c")) { try await model.saveRefusing("c") }
        #expect(model.saves == 2, "the body ran on the model's actor")
        #expect(store.version == version, "the failed unit committed nothing")
        #expect(try store.makeContext().get(bytes("todo/c")) == nil)
    }

    @Test func anActorRunsUnitsOfWorkOnItsOwnState() async throws {
        let store = try Store.inMemory()
        let counter = Counter(store: store)
        #expect(try await counter.importAll(["x", "y", "z"]) == 3)
        #expect(keys(try store.makeContext().scan()) == ["todo/x", "todo/y", "todo/z"])
    }

    @Test func messagesNameKeysAsTextOrHexAndAreLocalized() {
        let conflict = UnitOfWorkError.commitFailed(.conflict(keys: [bytes("café/1")], attempts: 2))
        #expect(conflict.description.contains("\"café/1\""))
        #expect(conflict.localizedDescription == conflict.description)
        let binary = ContextError.mergeConflict(keys: [[0x00, 0xFF, 0x10]])
        #expect(binary.description.contains("0x00ff10"))
        #expect(binary.localizedDescription == binary.description)
        let engine = EngineError.keyTooLarge(byteCount: 2_000, limit: 768)
        #expect(engine.localizedDescription.contains("use a shorter key"))
    }

    /// What applications ask of the storage goes through the store (Store+Maintenance.swift):
    /// a checkpoint now, the status, a verification, copies, the log's reach.
    @Test func theStoreCheckpointsReportsVerifiesAndCopiesWithoutTheEngine() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("strata-surface-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try Store.open(path: root + "/store")
        #expect(store.isEmbedded)
        for batch in 0..<10 {
            try store.write { unit in
                for index in 0..<10 { try unit.put(bytes("key\(batch * 10 + index)"), bytes("value")) }
            }
        }
        #expect(store.oldestLoggedVersion == 1, "no checkpoint yet: the log holds every version")
        #expect(store.logStatistics.syncCount >= 1)
        let before = try store.status()
        #expect(before.version == 10)
        #expect(before.checkpointVersion < 10)
        #expect(before.memtableKeys == 100)
        try store.checkpoint()
        let after = try store.status()
        #expect(after.checkpointVersion == 10)
        #expect(after.memtableKeys == 0)
        let check = store.verify()
        #expect(check.isValid, "\(check.problems)")
        #expect(check.keys == 100)
        #expect(try store.backup(to: root + "/backup").version == 10)
        #expect(try store.compact(to: root + "/compact").keyCount == 100)
        #expect { try store.backup(to: root + "/backup") } throws: { error in
            guard case EngineError.io(.alreadyExists) = error else { return false }
            return true
        }
        try store.close()
        for copy in ["backup", "compact"] {
            let opened = try Store.open(path: root + "/" + copy, mode: .readOnly)
            #expect(try opened.read { try $0.scan().count } == 100, "\(copy)")
            try opened.close()
        }
        #expect { try store.checkpoint() } throws: { error in
            guard case EngineError.closed = error else { return false }
            return true
        }
        // A read-only store takes no checkpoint; an in-memory one has no files to copy.
        let reader = try Store.open(path: root + "/backup", mode: .readOnly)
        #expect { try reader.checkpoint() } throws: { error in
            guard case EngineError.readOnly = error else { return false }
            return true
        }
        try reader.close()
        let memory = try Store.inMemory()
        #expect(memory.isEmbedded)
        for copy in ["backup", "compact"] {
            #expect {
                copy == "backup" ? try memory.backup(to: root + "/from-memory") : try memory.compact(to: root + "/from-memory")
            } throws: { error in
                guard case EngineError.notEmbedded(_, "in memory") = error else { return false }
                return "\(error)".contains("in-memory store cannot be copied")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: root + "/from-memory"))
    }

    @Test func reflectionIsShort() throws {
        let store = try Store.inMemory()
        try store.write { unit in
            for index in 0..<1_000 { try unit.put(bytes("key\(index)"), bytes("value")) }
        }
        let context = store.makeContext()
        let child = try context.makeChild()
        try child.put(bytes("staged"), bytes("1"))
        var text = ""
        dump(store, to: &text)
        #expect(text.count < 2_000)
        #expect(text.contains("version: 1"))
        text = ""
        dump(child, to: &text)
        #expect(text.count < 2_000)
        #expect(child.description == "Context(child at depth 1, version 1, 1 staged, open)")
        #expect("\(store)" == "Store(in memory, version 1)")
        try store.write { unit in
            #expect(unit.description == "UnitOfWork(depth 0, version 1, 0 staged, open)")
        }
    }
}
