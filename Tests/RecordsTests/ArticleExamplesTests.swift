import Strata
import StrataTesting
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

// The examples of the DocC articles UnitsOfWorkAndConcurrency.md, Migrations.md and
// DurabilityAndRecovery.md (Sources/Strata/Strata.docc), run as written there — their
// types' names prefixed with `Article` (and an entity name that is a type's name with
// them) — with what the articles say they do, and the articles' claims in prose that the
// other tests do not already hold them to. EtcdBackend.md's examples need an etcd at the
// addresses they name: Tests/EtcdTests/EtcdArticleExamplesTests.swift type-checks them.

// MARK: UnitsOfWorkAndConcurrency.md

/// The article's `Todo`.
struct ArticleTodo: Record {
    var id: Int
    var title: String
}

/// The article's `TitleTaken`.
struct ArticleTitleTaken: Error {}

/// The article's `addVisit(to:)`.
private func addVisit(to store: Store) async throws {
    try await store.write(retries: 10) { unit in
        let key = Array("visits".utf8)
        let visits = try unit.get(key).flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0
        try unit.put(key, Array(String(visits + 1).utf8))
    }
}

/// The article's `TodoListModel`.
@MainActor final class ArticleTodoListModel {
    let store: Store
    var pending: [String] = []
    var saved: [String] = []

    init(store: Store) { self.store = store }

    func save() async throws {
        try await store.write { unit in                // runs on the main actor
            let todos = unit.repository(ArticleTodo.self)
            for title in self.pending { try todos.insert(ArticleTodo(id: try todos.count() + 1, title: title)) }
            unit.afterCommit { _ in                     // the model changes once it is durable
                self.saved += self.pending
                self.pending = []
            }
        }
    }
}

// MARK: Migrations.md

/// The article's `NoteV1`.
struct ArticleNoteV1: Record {                        // what release 1 stored
    static var entityName: String { "ArticleNote" }
    var id: Int
    var text: String
}

/// The article's `NoteV2`.
struct ArticleNoteV2: Record {                        // release 2: an optional field
    static var entityName: String { "ArticleNote" }
    var id: Int
    var text: String
    var pinned: Bool?
}

/// The article's `Note`.
struct ArticleNote: Record {                          // release 3: a required field, indexed
    var id: Int
    var text: String
    var pinned: Bool?
    var priority: Int
    static var indexes: [RecordIndex<ArticleNote>] { [.index(\ArticleNote.priority)] }
}

/// The article's `Memo`.
struct ArticleMemo: Record {                          // Note renamed; text is now body
    var id: Int
    var body: String
    var priority: Int
    static var indexes: [RecordIndex<ArticleMemo>] { [.index(\ArticleMemo.priority)] }
}

/// Not in the article: `Memo` with its index dropped from the declaration, for the claim
/// that a dropped index's entries stay until `Migrator.reindex` removes them.
struct ArticleMemoWithoutIndexes: Record {
    static var entityName: String { "ArticleMemo" }
    var id: Int
    var body: String
    var priority: Int
}

// MARK: DurabilityAndRecovery.md

struct ArticleStock: Record { var id: Int; var count: Int }
struct ArticleOrder: Record { var id: Int; var quantity: Int }

/// The app's use case, as the app runs it.
private func checkout(order: Int, quantity: Int, in store: Store) throws {
    try store.write { unit in
        let stock = unit.repository(ArticleStock.self)
        guard var item = try stock.get(1), item.count >= quantity else { return }
        item.count -= quantity
        try stock.update(item)
        try unit.repository(ArticleOrder.self).insert(ArticleOrder(id: order, quantity: quantity))
    }
}

/// The article's `CheckoutWorkload`.
struct ArticleCheckoutWorkload: CrashWorkload {
    var name: String { "checkout" }
    var stepCount: Int { 40 }

    func setUp(_ store: Store) throws {
        try store.write { try $0.repository(ArticleStock.self).insert(ArticleStock(id: 1, count: 1_000)) }
    }

    func run(step index: Int, on store: Store, random: inout SplitMix64) throws {
        try checkout(order: index, quantity: Int(random.next() % 3) + 1, in: store)
    }

    func checkInvariant(_ store: Store) throws {             // stock plus orders never changes
        try store.read { context in
            guard let stock = try context.repository(ArticleStock.self).get(1) else { return }
            let ordered = try context.repository(ArticleOrder.self).sum(\ArticleOrder.quantity)
            guard stock.count + ordered == 1_000 else { throw WorkloadViolation("stock and orders disagree") }
        }
    }
}

@Suite struct ArticleExamplesTests {
    // MARK: UnitsOfWorkAndConcurrency.md

    /// UnitsOfWorkAndConcurrency.md: a unit of work and its nested unit, contexts by hand,
    /// the rules (conflicts, retries, hooks, read-only contexts), the main-actor model and
    /// a merge policy at `refresh()`.
    @MainActor @Test func theUnitsOfWorkArticleDoesWhatItSays() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }

        // Overview: committed as one, a nested unit rolled back alone, a unit that threw.
        try await store.write { unit in
            try unit.repository(ArticleTodo.self).insert(ArticleTodo(id: 1, title: "Buy milk"))
            try? unit.child { nested in                       // rolls back alone
                try nested.repository(ArticleTodo.self).insert(ArticleTodo(id: 2, title: "Maybe"))
                throw ArticleTitleTaken()
            }
            unit.afterCommit { receipt in print("saved as version \(receipt.version)") }
        }

        do {
            try await store.write { unit in
                try unit.repository(ArticleTodo.self).insert(ArticleTodo(id: 3, title: "Buy milk"))
                throw ArticleTitleTaken()                            // nothing of this unit is kept
            }
        } catch is ArticleTitleTaken {}
        #expect(try store.makeContext().repository(ArticleTodo.self).all().map(\.id) == [1])

        // Contexts by hand: a discarded child leaves nothing, a committed one merges.
        let screen = store.makeContext()                      // reads the store as of now
        let sheet = try screen.makeChild()
        try sheet.repository(ArticleTodo.self).insert(ArticleTodo(id: 4, title: "Draft"))
        sheet.discard()                                       // cancelled: nothing reaches screen
        let form = try screen.makeChild()
        try form.repository(ArticleTodo.self).insert(ArticleTodo(id: 5, title: "Call the vet"))
        try await form.commit()                               // merged into screen, no I/O
        try await screen.commit()                             // one durable commit
        #expect(try store.makeContext().repository(ArticleTodo.self).all().map(\.id) == [1, 5])

        // Rule 2: a root commit's receipt says how many commits shared its fdatasync.
        let single = store.makeContext()
        try single.put(Array("group".utf8), Array("1".utf8))
        #expect(try await single.commit().groupSize >= 1)

        // Rule 3: without `retries:`, a conflict is not run again.
        let contested = Array("contested".utf8)
        await #expect {
            try await store.write { unit in
                try unit.put(contested, Array("mine".utf8))
                let other = store.makeContext()
                try other.put(contested, Array("theirs".utf8))
                try other.commit()
            }
        } throws: { error in
            guard case let UnitOfWorkError.commitFailed(.conflict(keys, attempts)) = error else { return false }
            return keys == [contested] && attempts == 1
        }

        // Rule 4: a key only read is not checked.
        let decider = store.makeContext()
        _ = try decider.get(Array("stock".utf8))
        try decider.put(Array("decision".utf8), Array("made".utf8))
        try await store.write { try $0.put(Array("stock".utf8), Array("0".utf8)) }
        try await decider.commit()
        #expect(try store.makeContext().get(Array("decision".utf8)) == Array("made".utf8))

        // Rule 5: a conflicting attempt is run again on a new unit, and only the committed
        // attempt's hooks run.
        var attempts = 0
        var hooksRun = 0
        try await store.write(retries: 1) { unit in
            attempts += 1
            try unit.put(contested, Array("retried".utf8))
            unit.afterCommit { _ in hooksRun += 1 }
            if attempts == 1 {
                let other = store.makeContext()
                try other.put(contested, Array("first".utf8))
                try other.commit()
            }
        }
        #expect(attempts == 2 && hooksRun == 1)
        #expect(try store.makeContext().get(contested) == Array("retried".utf8))

        // Rule 8: a read-only context refuses writes.
        await #expect(throws: ContextError.readOnly) {
            try await store.read { try $0.put(Array("x".utf8), Array("y".utf8)) }
        }

        // "Eight tasks calling addVisit at once count eight visits."
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 { group.addTask { try await addVisit(to: store) } }
            try await group.waitForAll()
        }
        #expect(try store.makeContext().get(Array("visits".utf8)) == Array("8".utf8))

        // The main-actor model: its body runs on the main actor, its hook after the commit.
        let listStore = try Store.inMemory()
        defer { try? listStore.close() }
        let model = ArticleTodoListModel(store: listStore)
        model.pending = ["Buy milk", "Feed the cat"]
        try await model.save()
        #expect(model.saved == ["Buy milk", "Feed the cat"] && model.pending.isEmpty)
        #expect(try listStore.makeContext().repository(ArticleTodo.self).all().map(\.title) == ["Buy milk", "Feed the cat"])

        // Merge policies: `.childWins` keeps the context's own write at `refresh()`.
        let editor = store.makeContext(mergePolicy: .childWins)
        try editor.put(Array("title".utf8), Array("mine".utf8))
        try await store.write { unit in try unit.put(Array("title".utf8), Array("theirs".utf8)) }
        do {
            try await editor.commit()                         // theirs committed first
        } catch ContextError.conflict(let keys, _) {
            print("\(keys.count) key(s) changed meanwhile")   // nothing written; editor stays open
            try editor.refresh()                              // .childWins keeps "mine"
            try await editor.commit()
        }
        #expect(try store.makeContext().get(Array("title".utf8)) == Array("mine".utf8))
        #expect(editor.status == .committed, "the conflict was met and settled")

        // `.error`, the default, refuses at `refresh()` and names the keys.
        let strict = store.makeContext()
        try strict.put(Array("title".utf8), Array("again".utf8))
        try await store.write { unit in try unit.put(Array("title".utf8), Array("other".utf8)) }
        #expect(throws: ContextError.mergeConflict(keys: [Array("title".utf8)])) { try strict.refresh() }
    }

    // MARK: Migrations.md

    /// Migrations.md: an optional field gained, a required one and an index by a rewrite, a
    /// rename, a migrator with a rehearsal, a reindex, and the errors.
    @Test func theMigrationsArticleDoesWhatItSays() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }

        try await store.write { try $0.repository(ArticleNoteV1.self).insert(ArticleNoteV1(id: 1, text: "Water the plants")) }
        let note = try await store.read { try $0.repository(ArticleNoteV2.self).get(1) }      // pinned is nil
        #expect(note?.text == "Water the plants" && note?.pinned == nil)

        // The table: a dropped field is ignored by the older shape.
        try await store.write { try $0.repository(ArticleNoteV2.self).insert(ArticleNoteV2(id: 2, text: "Call mum", pinned: true)) }
        #expect(try store.makeContext().repository(ArticleNoteV1.self).get(2)?.text == "Call mum")

        // Before the rewrite, an old record does not decode as the type with a required field.
        #expect {
            try store.makeContext().repository(ArticleNote.self).get(1)
        } throws: { error in
            guard case let RecordError.decoding(entity, _, reason) = error else { return false }
            return entity == "ArticleNote" && reason.contains("priority")
        }

        try await store.write { unit in
            try unit.repository(ArticleNote.self).migrate(from: ArticleNoteV2.self) { old in
                ArticleNote(id: old.id, text: old.text, pinned: old.pinned, priority: old.pinned == true ? 1 : 0)
            }
        }
        let notes = store.makeContext().repository(ArticleNote.self)
        #expect(try notes.all().map(\.priority) == [0, 1])
        #expect(try notes.fetch(#Predicate<ArticleNote> { $0.priority == 1 }).map(\.id) == [2])
        #expect(try notes.checkIndexes().isEmpty)

        try await store.write { unit in
            let moved = try unit.repository(ArticleMemo.self).migrate(from: ArticleNote.self) { note in
                ArticleMemo(id: note.id, body: note.text, priority: note.priority)
            }
            print("\(moved) notes became memos")
        }
        let memos = store.makeContext().repository(ArticleMemo.self)
        #expect(try memos.all().map(\.body) == ["Water the plants", "Call mum"])
        #expect(try memos.fetch(#Predicate<ArticleMemo> { $0.priority == 1 }).map(\.id) == [2])
        #expect(try memos.checkIndexes().isEmpty)
        #expect(try store.makeContext().repository(ArticleNote.self).count() == 0, "the old entity is gone")
        #expect(try store.checkIndexEntries().isEmpty, "no entry of the old entity's index is left")

        // A record that does not decode as the old type names itself and the field.
        let failing = try Store.inMemory()
        defer { try? failing.close() }
        try await failing.write { try $0.repository(ArticleNoteV1.self).insert(ArticleNoteV1(id: 7, text: "Old")) }
        await #expect {
            try await failing.write { unit in
                try unit.repository(ArticleMemo.self).migrate(from: ArticleNote.self) { ArticleMemo(id: $0.id, body: $0.text, priority: $0.priority) }
            }
        } throws: { error in
            guard case let RecordError.migrationFailed(entity, id, field, _) = error else { return false }
            return entity == "ArticleNote" && id == "7" && field == "priority"
        }
        #expect(try failing.makeContext().repository(ArticleNoteV1.self).get(7)?.text == "Old", "nothing was staged")

        // The migrator, on a store as release 1 left it.
        do {
            let store = try Store.inMemory()
            defer { try? store.close() }
            try await store.write { unit in
                for (id, text) in [(1, "Water the plants"), (2, "Call mum"), (3, "Pay rent")] {
                    try unit.repository(ArticleNoteV1.self).insert(ArticleNoteV1(id: id, text: text))
                }
            }

            var migrator = Migrator()
            migrator.register("1 notes gain a priority", Migrator.migrate(from: ArticleNoteV2.self, to: ArticleNote.self) { old in
                ArticleNote(id: old.id, text: old.text, pinned: old.pinned, priority: 0)
            })
            migrator.register("2 notes become memos", Migrator.migrate(from: ArticleNote.self, to: ArticleMemo.self) { note in
                ArticleMemo(id: note.id, body: note.text, priority: note.priority)
            })
            migrator.register("3 rebuild the memos' indexes", Migrator.reindex(ArticleMemo.self))

            // What the article says of a rehearsal, checked before its lines run.
            let version = store.version
            let rehearsal = try migrator.rehearse(store)
            #expect(rehearsal.map(\.name) == migrator.names)
            #expect(rehearsal[0].recordsChanged == ["ArticleNote": 3])
            #expect(rehearsal[0].changedKeys > 3, "the records and their index entries")
            #expect(store.version == version, "a rehearsal commits nothing")
            #expect(try migrator.pending(in: store) == migrator.names)

            for step in try migrator.rehearse(store) {            // runs the pending steps, keeps nothing
                print(step.name, step.changedKeys, step.recordsChanged)
            }
            let ran = try migrator.migrate(store)                 // the three names; run again: []

            #expect(ran == ["1 notes gain a priority", "2 notes become memos", "3 rebuild the memos' indexes"])
            #expect(try migrator.migrate(store) == [])
            #expect(try migrator.applied(in: store) == ran)
            let migrated = try await store.read { try $0.repository(ArticleMemo.self).all() }
            #expect(migrated.map(\.body) == ["Water the plants", "Call mum", "Pay rent"])
            #expect(try store.makeContext().repository(ArticleMemo.self).checkIndexes().isEmpty)

            // An index dropped from the declaration leaves its entries, no longer kept, until
            // `Migrator.reindex` removes them.
            try await store.write { try $0.repository(ArticleMemoWithoutIndexes.self).delete(1) }
            #expect(try !store.checkIndexEntries().isEmpty, "the dropped index still names memo 1")
            migrator.register("4 memos drop the priority index", Migrator.reindex(ArticleMemoWithoutIndexes.self))
            #expect(try migrator.migrate(store) == ["4 memos drop the priority index"])
            #expect(try store.checkIndexEntries().isEmpty)

            // A build that does not register a step the store records is refused; so is a
            // migrator with two steps of one name.
            var older = Migrator()
            older.register("1 notes gain a priority") { _ in }
            #expect(throws: MigrationError.unknownAppliedStep("2 notes become memos")) { try older.migrate(store) }
            var twice = Migrator()
            twice.register("x") { _ in }
            twice.register("x") { _ in }
            #expect(throws: MigrationError.duplicateStep("x")) { try twice.migrate(store) }
        }
    }

    // MARK: DurabilityAndRecovery.md

    /// DurabilityAndRecovery.md: the two durabilities, the recovery report, a damaged log
    /// refused and salvaged, the store's upkeep, a full disk, and the crash harness on the
    /// article's workload.
    @Test func theDurabilityArticleDoesWhatItSays() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-article-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/app.strata"
        let cachePath = directory + "/cache.strata"
        let backupPath = directory + "/backup.strata"
        let compactPath = directory + "/compact.strata"

        let store = try Store.open(path: path)                 // .full: acknowledged means durable
        let cache = try Store.open(path: cachePath, options: EngineOptions(durability: .relaxed))

        // A relaxed store's commits survive a clean close (its checkpoint syncs them).
        try await cache.write { try $0.put(Array("cached".utf8), Array("1".utf8)) }
        try cache.close()
        let reopenedCache = try Store.open(path: cachePath, options: EngineOptions(durability: .relaxed))
        #expect(try reopenedCache.makeContext().get(Array("cached".utf8)) == Array("1".utf8))
        try reopenedCache.close()

        let report = store.recoveryReport
        print("checkpoint \(report.checkpointVersion), \(report.batchesReplayed) commit(s) replayed, at \(report.lastDurableVersion)")
        for damage in report.log.damage { print(damage) }      // each cut: its file, offset, LSN and bytes
        #expect(report.log.damage.isEmpty && report.lastDurableVersion == 0, "a new store")

        // Looking after a store.
        for index in 0..<10 { try await store.write { try $0.put(Array("key\(index)".utf8), Array("value".utf8)) } }
        try store.checkpoint()                                  // fold the log into the data file now
        let status = try store.status()
        print("version \(status.version), checkpoint \(status.checkpointVersion), log \(status.logBytes) bytes")
        let check = store.verify()                              // problems are listed, never thrown
        if !check.isValid { print(check.problems) }
        try store.backup(to: backupPath)                        // a consistent copy while commits continue
        try store.compact(to: compactPath)                      // live keys only: no free pages, no history

        #expect(status.version == 10 && status.checkpointVersion == 10 && status.memtableKeys == 0)
        #expect(check.isValid && check.keys == 10)
        for copy in [backupPath, compactPath] {
            let opened = try Store.open(path: copy, mode: .readOnly)
            #expect(try opened.makeContext().scan().count == 10, "\(copy)")
            try opened.close()
        }
        try store.close()

        // A damaged log: a copy of a live store whose log holds three commits, with a byte of
        // the first one's frame flipped (a segment's header is 64 bytes and a frame's 40:
        // FORMAT.md); the later frames show it was durable, so this is corruption.
        let damagedPath = directory + "/damaged.strata"
        let live = try Store.open(path: directory + "/live.strata")
        for index in 1...3 { try await live.write { try $0.put(Array("k\(index)".utf8), Array("v".utf8)) } }
        try FileManager.default.copyItem(atPath: directory + "/live.strata", toPath: damagedPath)
        try live.close()
        let segment = try FileManager.default.contentsOfDirectory(atPath: damagedPath + "/wal")
            .filter { $0.hasPrefix("wal-") && $0.hasSuffix(".seg") && !$0.hasPrefix("wal-spare") }.sorted()[0]
        let segmentURL = URL(fileURLWithPath: damagedPath + "/wal/" + segment)
        var segmentBytes = try Data(contentsOf: segmentURL)
        segmentBytes[64 + 40] ^= 0x01
        try segmentBytes.write(to: segmentURL)
        #expect {
            try Store.open(path: damagedPath)
        } throws: { error in
            guard case let EngineError.log(.corruptFrame(file, offset, _, _)) = error else { return false }
            return file.hasSuffix(segment) && offset == 64
        }

        do {
            let path = damagedPath
            let store: Store
            do {
                store = try Store.open(path: path)
            } catch EngineError.log(.corruptFrame(let file, let offset, let lsn, _)) {
                print("the log is damaged at offset \(offset) of \(file) (\(lsn)); salvaging what verifies")
                var options = EngineOptions()
                options.log.recoveryMode = .skipCorrupted
                store = try Store.open(path: path, options: options)
                for damage in store.recoveryReport.log.damage { print(damage) }
            }

            #expect(store.recoveryReport.log.damage.contains { $0.kind == .corruption })
            #expect(try store.makeContext().get(Array("k1".utf8)) == nil, "the damaged commit is not returned")
            #expect(try store.makeContext().get(Array("k3".utf8)) == Array("v".utf8), "the commits after it are kept")
            try store.close()
        }

        // A full disk: the commit that met it has an unknown outcome, the store refuses
        // writes until it is reopened, and nothing acknowledged is lost.
        try Self.aFullDiskLosesNothingAcknowledged()

        // The crash harness on the article's workload, as the article runs it.
        var harness = CrashHarness(workload: ArticleCheckoutWorkload())
        harness.seeds = [1, 2]
        harness.sampleLimit = 10                       // crash points (or flipped bytes) per suite and seed; nil: all
        for suite in [CrashMode.sim, .recovery, .torn, .errors, .bitflip] {
            let result = harness.run(suite)
            #expect(result.failures.isEmpty, "\(suite): \(result.failures)")
        }
    }

    /// DurabilityAndRecovery.md: "a full disk included — fails the commits waiting on it
    /// with outcomeUnknown … the store refuses writes until it is reopened … Nothing
    /// acknowledged is lost".
    private static func aFullDiskLosesNothingAcknowledged() throws {
        let fileSystem = SimulatedFileSystem()
        let store = try Store.open(path: "/full", fileSystem: fileSystem)
        try store.write { try $0.put(Array("kept".utf8), Array("1".utf8)) }
        fileSystem.failNext(.write, errno: ENOSPC)
        #expect {
            try store.write { try $0.put(Array("lost".utf8), Array("2".utf8)) }
        } throws: { error in
            guard case UnitOfWorkError.commitFailed(.outcomeUnknown) = error else { return false }
            return "\(error)".contains("the device is full")
        }
        #expect {
            try store.write { try $0.put(Array("later".utf8), Array("3".utf8)) }
        } throws: { error in
            guard case UnitOfWorkError.commitFailed(.notWritten) = error else { return false }
            return true
        }
        fileSystem.crash(.keepAll)
        let reopened = try Store.open(path: "/full", fileSystem: fileSystem)
        defer { try? reopened.close() }
        #expect(try reopened.makeContext().get(Array("kept".utf8)) == Array("1".utf8))
        try reopened.write { try $0.put(Array("later".utf8), Array("3".utf8)) }
        #expect(try reopened.makeContext().get(Array("later".utf8)) == Array("3".utf8))
        withExtendedLifetime(store) {}
    }
}

// MARK: Outbox.md

/// The article's `Meal`: what the ledger consumer keeps.
struct ArticleMeal: Record {
    var id: Int
    var child: Int
    var grams: Int

    init(child: Int, grams: Int) {
        id = child * 1_000 + grams
        self.child = child
        self.grams = grams
    }
}

/// The article's `ChildWasFed`.
struct ArticleChildWasFed: DomainEvent { var child: Int; var grams: Int }

/// The article's ledger consumer: its effect and its acknowledgement in one unit.
private func runLedger(_ store: Store) async throws {
    for try await delivery in store.events(of: ArticleChildWasFed.self, consumer: "ledger") {
        try await store.write(retries: 3) { unit in
            try unit.repository(ArticleMeal.self).insert(ArticleMeal(child: delivery.event.child, grams: delivery.event.grams))
            try unit.acknowledge(delivery)
        }
    }
}

@Suite struct OutboxArticleTests {
    /// The ledger's meals and its position commit together, so a meal is kept exactly once
    /// per event, and a consumer registered later starts with the oldest kept event.
    @Test func theLedgerKeepsOneMealPerEventAndALaterConsumerMissesNothing() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in
            try unit.publish(ArticleChildWasFed(child: 1, grams: 120))
            try unit.publish(ArticleChildWasFed(child: 2, grams: 80))
        }
        let ledger = Task { try await runLedger(store) }
        for _ in 0..<500 where try await store.read({ try $0.repository(ArticleMeal.self).count() }) < 2 {
            try await Task.sleep(for: .milliseconds(20))
        }
        ledger.cancel()
        try await ledger.value
        #expect(try await store.read { try $0.repository(ArticleMeal.self).fetch().map(\.grams) } == [120, 80])
        // The ledger was the only consumer: both events are gone once it acknowledged them...
        #expect(try await store.read { try $0.eventTypes() }.isEmpty)
        // ...and while no consumer is registered, events are kept for the first one.
        let quiet = try Store.inMemory()
        defer { try? quiet.close() }
        try await quiet.write { try $0.publish(ArticleChildWasFed(child: 3, grams: 50)) }
        try await quiet.write { try $0.publish(ArticleChildWasFed(child: 4, grams: 60)) }
        var late: [Int] = []
        for try await delivery in quiet.events(of: ArticleChildWasFed.self, consumer: "late") {
            late.append(delivery.event.child)
            if late.count == 2 { break }
        }
        #expect(late == [3, 4])
    }
}
