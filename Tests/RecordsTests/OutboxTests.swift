import Strata
import StrataTesting
import Foundation
import Synchronization
import Testing

struct ChildWasFed: DomainEvent, Equatable {
    var child: String
    var grams: Int
}

struct Meal: Record, Equatable {
    var id: Int
    var child: String
}

private func temporaryStorePath() -> String {
    NSTemporaryDirectory() + "strata-outbox-\(UUID().uuidString)"
}

/// The transactional outbox (Outbox.B1–B3) and its consumers (EventDeliveries.D1–D3).
@Suite struct OutboxTests {
    @Test func eventsCommitWithTheirUnitAndComeInCommitOrder() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        let first = try await store.write { unit in
            try unit.repository(Meal.self).insert(Meal(id: 1, child: "Ann"))
            try unit.publish(ChildWasFed(child: "Ann", grams: 120))
            try unit.publish(ChildWasFed(child: "Ann", grams: 30))
            return unit.context.version
        }
        try await store.write { unit in try unit.publish(ChildWasFed(child: "Bo", grams: 80)) }
        let deliveries = try await firstElements(3, of: store.events(of: ChildWasFed.self, consumer: "mailer"))
        #expect(deliveries.map(\.event) == [ChildWasFed(child: "Ann", grams: 120), ChildWasFed(child: "Ann", grams: 30),
                                            ChildWasFed(child: "Bo", grams: 80)])
        // The commit's own version is in each event's position, and the order of publish
        // within a commit is kept.
        #expect(deliveries.map(\.position.version) == [first + 1, first + 1, first + 2])
        #expect(deliveries[0].position < deliveries[1].position && deliveries[1].position < deliveries[2].position)
    }

    @Test func whatIsRolledBackDiscardedOrFailsPublishesNothing() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        struct Cancelled: Error {}
        await #expect(throws: Cancelled.self) {
            try await store.write { unit in
                try unit.publish(ChildWasFed(child: "rolled back", grams: 1))
                throw Cancelled()
            }
        }
        try await store.write { unit in
            try unit.publish(ChildWasFed(child: "kept", grams: 2))
            #expect(throws: Cancelled.self) {
                try unit.child { nested in
                    try nested.publish(ChildWasFed(child: "nested, rolled back", grams: 3))
                    throw Cancelled()
                }
            }
            try unit.child { nested in try nested.publish(ChildWasFed(child: "nested, merged", grams: 4)) }
        }
        // A discarded child context.
        let context = store.makeContext()
        let form = try context.makeChild()
        try form.publish(ChildWasFed(child: "discarded form", grams: 5))
        form.discard()
        try await context.commit()
        // A failed commit: the insert collides.
        try await store.write { try $0.repository(Meal.self).insert(Meal(id: 7, child: "x")) }
        await #expect(throws: (any Error).self) {
            try await store.write { unit in
                try unit.publish(ChildWasFed(child: "duplicate", grams: 6))
                try unit.repository(Meal.self).insert(Meal(id: 7, child: "x"))
            }
        }
        // A read-only context cannot publish.
        await #expect(throws: ContextError.readOnly) { try await store.read { try $0.publish(ChildWasFed(child: "read", grams: 7)) } }
        try await store.write { unit in try unit.publish(ChildWasFed(child: "last", grams: 8)) }
        let seen = try await firstElements(3, of: store.events(of: ChildWasFed.self, consumer: "audit")).map(\.event.child)
        #expect(seen == ["kept", "nested, merged", "last"])
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [3])
    }

    @Test func aConflictRetriedPublishesOnce() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { try $0.put(Array("n".utf8), [0]) }
        let racing = store.makeContext()
        _ = try racing.get(Array("n".utf8))
        try racing.put(Array("n".utf8), [1])
        var attempts = 0
        try await store.write(retries: 1) { unit in
            attempts += 1
            _ = try unit.get(Array("n".utf8))
            try unit.put(Array("n".utf8), [2])
            try unit.publish(ChildWasFed(child: "once", grams: attempts))
            if attempts == 1 { try await racing.commit() }
        }
        #expect(attempts == 2)
        let seen = try await firstElements(1, of: store.events(of: ChildWasFed.self, consumer: "c"))
        #expect(seen.map(\.event) == [ChildWasFed(child: "once", grams: 2)])
        #expect(try await store.read { try $0.eventTypes() }.first?.count == 1)
    }

    @Test func aConsumerResumesAfterWhatItAcknowledgedAcrossReopening() async throws {
        let path = temporaryStorePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let store = try Store.open(path: path)
            defer { try? store.close() }
            for grams in 1...5 { try await store.write { try $0.publish(ChildWasFed(child: "Ann", grams: grams)) } }
            let firstTwo = try await firstElements(3, of: store.events(of: ChildWasFed.self, consumer: "mailer"))
            try await firstTwo[1].acknowledge()
            // The third was delivered, not acknowledged.
        }
        let store = try Store.open(path: path)
        defer { try? store.close() }
        let again = try await firstElements(3, of: store.events(of: ChildWasFed.self, consumer: "mailer"))
        #expect(again.map(\.event.grams) == [3, 4, 5])
        // Everything before the acknowledged position is gone: "mailer" is the only consumer.
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [3])
        let status = try await store.read { try $0.eventConsumers() }
        #expect(status.map(\.consumer) == ["mailer"] && status.map(\.pending) == [3])
    }

    @Test func consumersKeepTheirOwnPositionsAndEventsStayUntilAllArePast() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in
            try unit.context.registerEventConsumer("fast", of: ChildWasFed.eventName)
            try unit.context.registerEventConsumer("slow", of: ChildWasFed.eventName)
        }
        for grams in 1...4 { try await store.write { try $0.publish(ChildWasFed(child: "Bo", grams: grams)) } }
        let fast = try await firstElements(4, of: store.events(of: ChildWasFed.self, consumer: "fast"))
        for delivery in fast { try await delivery.acknowledge() }
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [4])
        let slow = try await firstElements(2, of: store.events(of: ChildWasFed.self, consumer: "slow"))
        try await slow[1].acknowledge()
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [2])
        let status = try await store.read { try $0.eventConsumers(of: ChildWasFed.eventName) }
        #expect(status.map(\.consumer) == ["fast", "slow"])
        #expect(status.map(\.pending) == [0, 2])
        #expect(status[0].acknowledged == fast[3].position && status[1].acknowledged == slow[1].position)
        // Removing the slow consumer leaves the fast one's position to decide.
        try await store.write { try $0.context.removeEventConsumer("slow", of: ChildWasFed.eventName) }
        #expect(try await store.read { try $0.eventTypes() }.isEmpty)
        // Acknowledging an earlier event on its own moves nothing back.
        try await fast[0].acknowledge()
        #expect(try await store.read { try $0.eventConsumers() }.first?.acknowledged == fast[3].position)
        await #expect(throws: EventError.unknownConsumer(event: "ChildWasFed", consumer: "slow")) { try await slow[0].acknowledge() }
    }

    @Test func anAcknowledgementCommitsWithTheConsumersOwnWritesOrNotAtAll() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        for grams in [10, 20] { try await store.write { try $0.publish(ChildWasFed(child: "Cy", grams: grams)) } }
        let deliveries = try await firstElements(2, of: store.events(of: ChildWasFed.self, consumer: "ledger"))
        struct SendFailed: Error {}
        await #expect(throws: SendFailed.self) {
            try await store.write { unit in
                try unit.repository(Meal.self).insert(Meal(id: 1, child: "Cy"))
                try unit.acknowledge(deliveries[0])
                throw SendFailed()
            }
        }
        #expect(try await store.read { try $0.eventConsumers() }.first?.acknowledged == .start)
        try await store.write { unit in
            try unit.repository(Meal.self).insert(Meal(id: 1, child: "Cy"))
            try unit.acknowledge(deliveries[0])
        }
        #expect(try await store.read { try $0.eventConsumers() }.first?.acknowledged == deliveries[0].position)
        #expect(try await store.read { try $0.repository(Meal.self).count() } == 1)
        let rest = try await firstElements(1, of: store.events(of: ChildWasFed.self, consumer: "ledger"))
        #expect(rest.map(\.event.grams) == [20])
    }

    @Test func aWaitingConsumerReceivesEventsAsTheyAreCommitted() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        let received = Task { try await firstElements(3, of: store.events(of: ChildWasFed.self, consumer: "live")).map(\.event.grams) }
        for grams in 1...3 {
            try await Task.sleep(for: .milliseconds(20))
            // Commits of other keys deliver nothing.
            try await store.write { try $0.put(Array("other\(grams)".utf8), [1]) }
            try await store.write { try $0.publish(ChildWasFed(child: "Di", grams: grams)) }
        }
        #expect(try await received.value == [1, 2, 3])
    }

    @Test func iterationEndsWhenTheStoreClosesOrTheTaskIsCancelled() async throws {
        let store = try Store.inMemory()
        // Counts what it received, so the store is closed once the event arrived (however
        // long a loaded machine takes) and the iteration must then end on the close.
        let received = Mutex(0)
        let waiting = Task {
            for try await _ in store.events(of: ChildWasFed.self, consumer: "c") { received.withLock { $0 += 1 } }
            return received.withLock { $0 }
        }
        try await store.write { try $0.publish(ChildWasFed(child: "Ed", grams: 1)) }
        for _ in 0..<3_000 where received.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(10)) }
        try store.close()
        #expect(try await waiting.value == 1)

        let other = try Store.inMemory()
        defer { try? other.close() }
        let cancelled = Task { try await firstElements(1, of: other.events(of: ChildWasFed.self, consumer: "c")).count }
        try await Task.sleep(for: .milliseconds(50))
        cancelled.cancel()
        #expect(try await cancelled.value == 0)
    }

    @Test func aConsumerCanBePositionedBackToReadKeptEventsAgain() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in
            try unit.context.registerEventConsumer("a", of: ChildWasFed.eventName)
            try unit.context.registerEventConsumer("b", of: ChildWasFed.eventName)
        }
        for grams in 1...3 { try await store.write { try $0.publish(ChildWasFed(child: "Fay", grams: grams)) } }
        let all = try await firstElements(3, of: store.events(of: ChildWasFed.self, consumer: "a"))
        try await all[2].acknowledge()
        try await store.write { try $0.context.positionEventConsumer("a", of: ChildWasFed.eventName, at: all[0].position) }
        let again = try await firstElements(2, of: store.events(of: ChildWasFed.self, consumer: "a"))
        #expect(again.map(\.event.grams) == [2, 3])
        await #expect(throws: EventError.invalidConsumerName("")) {
            try await store.write { try $0.context.registerEventConsumer("", of: ChildWasFed.eventName) }
        }
    }

    @Test func aConsumerBeyondItsRetentionIsToldOfTheGapNeverReadsPastIt() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        let name = ChildWasFed.eventName
        try await store.write { unit in
            try unit.context.registerEventConsumer("fast", of: name)
            try unit.context.registerEventConsumer("slow", of: name, retention: 2)
        }
        for grams in 1...5 { try await store.write { try $0.publish(ChildWasFed(child: "Gus", grams: grams)) } }
        // Before anyone acknowledges, nothing is deleted: the slow consumer reads from the first.
        #expect(try await store.read { try $0.events(of: ChildWasFed.self, consumer: "slow") }.map(\.event.grams) == [1, 2, 3, 4, 5])
        let fast = try await firstElements(5, of: store.events(of: ChildWasFed.self, consumer: "fast"))
        for delivery in fast { try await delivery.acknowledge() }
        // Only the newest two are kept for "slow", so the first three went with the fast one's acknowledgements.
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [2])
        let gap = EventError.fellBehind(event: name, consumer: "slow", acknowledged: .start, lostThrough: fast[2].position,
                                        retention: 2)
        await #expect(throws: gap) { try await store.read { try $0.events(of: ChildWasFed.self, consumer: "slow") } }
        await #expect(throws: gap) { _ = try await firstElements(1, of: store.events(of: ChildWasFed.self, consumer: "slow")) }
        #expect(gap.description.contains("--move slow --event ChildWasFed --to \(fast[2].position)"))
        let slow = try await store.read { try $0.eventConsumers() }.first { $0.consumer == "slow" }
        #expect(slow?.retention == 2 && slow?.lostThrough == fast[2].position && slow?.pending == 2)
        // Accepting the gap: it reads on from there.
        try await store.write { try $0.context.positionEventConsumer("slow", of: name, at: fast[2].position) }
        #expect(try await firstElements(2, of: store.events(of: ChildWasFed.self, consumer: "slow")).map(\.event.grams) == [4, 5])
        await #expect(throws: EventError.invalidRetention(0)) {
            try await store.write { try $0.context.registerEventConsumer("none", of: name, retention: 0) }
        }
    }

    @Test func aSecondInstanceOfAConsumerCannotApplyAnEventsEffectsAgain() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { try $0.context.registerEventConsumer("ledger", of: ChildWasFed.eventName) }
        try await store.write { try $0.publish(ChildWasFed(child: "Hal", grams: 9)) }
        // Two instances read the same event at once.
        let one = store.makeContext(), two = store.makeContext()
        let first = try #require(try one.events(of: ChildWasFed.self, consumer: "ledger").first)
        let second = try #require(try two.events(of: ChildWasFed.self, consumer: "ledger").first)
        try one.repository(Meal.self).insert(Meal(id: 1, child: "Hal"))
        try one.acknowledge(first)
        try await one.commit()
        try two.repository(Meal.self).insert(Meal(id: 2, child: "Hal"))
        try two.acknowledge(second)
        await #expect(throws: ContextError.self) { try await two.commit() }
        two.discard()
        // Run again, the unit finds the event acknowledged and is not committed.
        await #expect(throws: EventError.alreadyAcknowledged(event: "ChildWasFed", consumer: "ledger", position: second.position,
                                                              acknowledged: first.position)) {
            try await store.write { unit in
                try unit.repository(Meal.self).insert(Meal(id: 2, child: "Hal"))
                try unit.acknowledge(second)
            }
        }
        #expect(try await store.read { try $0.repository(Meal.self).count() } == 1)
    }

    @Test func aLimitedConsumerIsToldOnlyOfWhatWasDeleted() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        let name = ChildWasFed.eventName
        try await store.write { unit in
            try unit.context.registerEventConsumer("limited", of: name, retention: 2)
            try unit.context.registerEventConsumer("lagging", of: name)
            try unit.context.registerEventConsumer("quick", of: name)
        }
        for grams in 1...5 { try await store.write { try $0.publish(ChildWasFed(child: "Ida", grams: grams)) } }
        let all = try await store.read { try $0.events(of: ChildWasFed.self, consumer: "quick") }
        try await all[4].acknowledge()
        // "lagging" has no limit and is at the start: nothing goes, and "limited" lost nothing.
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [5])
        #expect(try await store.read { try $0.events(of: ChildWasFed.self, consumer: "limited") }.count == 5)
        try await store.write { unit in
            try unit.acknowledge(try #require(try unit.context.events(of: ChildWasFed.self, consumer: "lagging", limit: 1).first))
        }
        // Only the first went: "limited" is told of exactly that one.
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [4])
        await #expect(throws: EventError.fellBehind(event: name, consumer: "limited", acknowledged: .start, lostThrough: all[0].position,
                                                    retention: 2)) {
            try await store.read { try $0.events(of: ChildWasFed.self, consumer: "limited") }
        }
    }

    @Test func aReclaimThatMissedANewConsumerConflictsInsteadOfDeletingItsEvents() async throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        let name = ChildWasFed.eventName
        try await store.write { try $0.context.registerEventConsumer("only", of: name) }
        for grams in 1...3 { try await store.write { try $0.publish(ChildWasFed(child: "Jo", grams: grams)) } }
        let acknowledging = store.makeContext()
        let events = try acknowledging.events(of: ChildWasFed.self, consumer: "only")
        try acknowledging.acknowledge(events[2])
        // Meanwhile a new consumer registers: it must get the three events.
        try await store.write { try $0.context.registerEventConsumer("newcomer", of: name) }
        await #expect(throws: ContextError.self) { try await acknowledging.commit() }
        acknowledging.discard()
        try await events[2].acknowledge()
        #expect(try await store.read { try $0.events(of: ChildWasFed.self, consumer: "newcomer") }.map(\.event.grams) == [1, 2, 3])
        // Another consumer's acknowledgement meanwhile does not conflict with a reclaim...
        try await store.write { try $0.publish(ChildWasFed(child: "Jo", grams: 4)) }
        let slowest = store.makeContext()
        let next = try slowest.events(of: ChildWasFed.self, consumer: "newcomer", limit: 1)
        try slowest.acknowledge(next[0])
        try await store.read { try $0.events(of: ChildWasFed.self, consumer: "only") }[0].acknowledge()
        try await slowest.commit()
        #expect(try await store.read { try $0.eventTypes() }.map(\.count) == [3])
        // ...a registration does.
        let again = store.makeContext()
        try again.acknowledge(try again.events(of: ChildWasFed.self, consumer: "newcomer", limit: 1)[0])
        try await store.write { try $0.context.registerEventConsumer("other", of: name) }
        await #expect(throws: ContextError.self) { try await again.commit() }
        again.discard()
    }

    @Test func eventsOfSeveralTypesInOneCommitAndFromConcurrentUnits() async throws {
        struct Weighed: DomainEvent, Equatable { var grams: Int }
        let store = try Store.inMemory()
        defer { try? store.close() }
        try await store.write { unit in
            try unit.publish(Weighed(grams: 1))
            try unit.publish(ChildWasFed(child: "Kim", grams: 2))
            try unit.publish(Weighed(grams: 3))
        }
        try await store.write { try $0.context.registerEventConsumer("w", of: Weighed.eventName) }
        let weighed = try await store.read { try $0.events(of: Weighed.self, consumer: "w") }
        #expect(weighed.map(\.event.grams) == [1, 3] && weighed[0].position < weighed[1].position)
        // Eight tasks publish 25 units each at once: group commits stamp each unit's own version.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for unit in 0..<25 { try await store.write { try $0.publish(ChildWasFed(child: "task \(task)", grams: unit)) } }
                }
            }
            try await group.waitForAll()
        }
        try await store.write { try $0.context.registerEventConsumer("all", of: ChildWasFed.eventName) }
        let all = try await store.read { try $0.events(of: ChildWasFed.self, consumer: "all", limit: .max) }.dropFirst()
        #expect(all.count == 200 && Set(all.map(\.position.version)).count == 200)
        for task in 0..<8 {
            #expect(all.filter { $0.event.child == "task \(task)" }.map(\.event.grams) == Array(0..<25))
        }
    }
}
