import Strata
@testable import StrataRecords
import StrataTesting
import Foundation
import TestBackends
import Testing

struct Member: Record, Equatable {
    var id: Int
    var email: String
    var city: String
    var age: Int
    var nickname: String?

    static var indexes: [RecordIndex<Member>] {
        [.index(\Member.email, unique: true), .index(\Member.city), .index(\Member.age), .index(\Member.nickname)]
    }
}

/// The same records without indexes, stored under the same entity name.
struct PlainMember: Record {
    static var entityName: String { "Member" }
    var id: Int
    var email: String
    var city: String
    var age: Int
    var nickname: String?
}

@Suite struct IndexTests {
    static let cities = ["Rome", "Oslo", "Lima", "Kyiv"]

    static func member(_ id: Int, random: inout SplitMix64) -> Member {
        Member(id: id, email: "m\(id)@example.org", city: cities[Int(random.next() % 4)], age: 18 + Int(random.next() % 60),
               nickname: random.next() % 3 == 0 ? nil : "n\(random.next() % 10)")
    }

    /// RecordIndex.X1: one entry per record per index, and each index answers equality queries exactly
    /// as filtering the records does.
    static func checkConsistency(_ store: Store) throws {
        let context = store.makeContext()
        let members = try context.repository(Member.self).all()
        let entries = try context.scan(prefix: [0xFE, UInt8(ascii: "i")])
        #expect(entries.count == members.count * Member.indexes.count, "\(entries.count) entries for \(members.count) members")
        for city in cities {
            let viaIndex = try context.repository(Member.self).fetch(#Predicate<Member> { $0.city == city })
            #expect(viaIndex.sorted { $0.id < $1.id } == members.filter { $0.city == city })
        }
        for member in members {
            let email = member.email
            #expect(try context.repository(Member.self).fetch(#Predicate<Member> { $0.email == email }) == [member])
        }
    }

    @Test(arguments: Backend.allCases, [UInt64(1), 2])
    func indexesStayConsistentThroughRandomWritesRollbacksAndDiscards(backend: Backend, seed: UInt64) async throws {
        print("IndexTests seed \(seed)")
        var random = SplitMix64(seed: seed)
        try await backend.withStore { store throws in
            for round in 0..<60 {
                // The round's changes are drawn first; the unit of work only applies them.
                let changes: [(id: Int, member: Member?)] = (0..<(1 + random.next() % 4)).map { _ in
                    let id = Int(random.next() % 40)
                    return (id, random.next() % 3 == 0 ? nil : Self.member(id, random: &random))
                }
                let nested = Self.member(100 + round, random: &random)
                let rollBackNested = random.next() % 2 == 0
                let discarded = Self.member(200 + round, random: &random)
                let rollBackAll = random.next() % 4 == 0
                do {
                    try store.write { unit in
                        let repository = unit.repository(Member.self)
                        for (id, member) in changes {
                            if let member { try repository.upsert(member) } else { try? repository.delete(id) }
                        }
                        try? unit.child { child in
                            try child.repository(Member.self).upsert(nested)
                            if rollBackNested { throw CancellationError() }
                        }
                        let draft = try unit.context.makeChild()
                        try draft.repository(Member.self).upsert(discarded)
                        draft.discard()
                        if rollBackAll { throw CancellationError() }
                    }
                } catch {
                    // A rolled-back round is fine; any other failure is not.
                    guard error is CancellationError else { throw error }
                }
                try Self.checkConsistency(store)
            }
            let members = try store.makeContext().repository(Member.self).all()
            #expect(!members.contains { $0.id >= 200 })
            // Range and optional terms through the indexes match filtering.
            let repository = store.makeContext().repository(Member.self)
            let older = try repository.fetch(#Predicate<Member> { $0.age >= 40 && $0.age < 60 }, sortBy: [SortDescriptor(\Member.id)])
            #expect(older == members.filter { $0.age >= 40 && $0.age < 60 })
            let named = try repository.fetch(#Predicate<Member> { $0.nickname == "n3" }, sortBy: [SortDescriptor(\Member.id)])
            #expect(named == members.filter { $0.nickname == "n3" })
        }
    }

    @Test(arguments: Backend.allCases) func uniqueViolationNamesTheIndexAndTheValue(backend: Backend) async throws {
        try await backend.withStore { store throws in
            var random = SplitMix64(seed: 3)
            let first = Self.member(1, random: &random)
            try store.write { try $0.repository(Member.self).insert(first) }
            var clash = Self.member(2, random: &random)
            clash.email = first.email
            #expect(throws: RecordError.uniqueViolation(entity: "Member", index: "email", value: first.email)) {
                try store.write { try $0.repository(Member.self).insert(clash) }
            }
            // Changing one's own unique value is fine, and frees the old one.
            var moved = first
            moved.email = "new@example.org"
            try store.write { try $0.repository(Member.self).update(moved) }
            try store.write { try $0.repository(Member.self).insert(clash) }
            #expect(try store.makeContext().repository(Member.self).first(#Predicate<Member> { $0.email == "m1@example.org" })?.id == 2)
        }
    }

    /// An update stages the record and only the index entries whose values changed (a
    /// removed entry and its replacement per changed index); the entries left as they were
    /// still find the updated record.
    @Test(arguments: Backend.allCases) func anUpdateStagesOnlyTheEntriesThatChange(backend: Backend) async throws {
        try await backend.withStore { store throws in
            var random = SplitMix64(seed: 4)
            let member = Self.member(1, random: &random)
            try store.write { try $0.repository(Member.self).insert(member) }
            var moved = member
            moved.city = member.city + "-moved"
            let unit = store.makeContext()
            try unit.repository(Member.self).update(moved)
            // The record, and the city entry removed and written anew.
            #expect(unit.changeCount == 3)
            _ = try unit.commit()
            let email = member.email
            let reader = store.makeContext().repository(Member.self)
            #expect(try reader.first(#Predicate<Member> { $0.email == email }) == moved)
            let age = member.age
            #expect(try reader.fetch(#Predicate<Member> { $0.age == age }).map(\.id) == [1])
            let city = moved.city
            #expect(try reader.fetch(#Predicate<Member> { $0.city == city }).map(\.id) == [1])
        }
    }

    @Test(arguments: Backend.allCases) func anIndexDeclaredLaterIsBuiltForExistingRecords(backend: Backend) async throws {
        try await backend.withStore { store throws in
            try store.write { unit in
                for id in 0..<30 {
                    try unit.repository(PlainMember.self).insert(
                        PlainMember(id: id, email: "p\(id)@x", city: id % 2 == 0 ? "Rome" : "Oslo", age: 20 + id, nickname: nil))
                }
            }
            #expect(try store.makeContext().scan(prefix: [0xFE, UInt8(ascii: "i")]).isEmpty)
            // Reading stages nothing: the fetch scans, and the unit commits no version.
            let version = store.version
            let before = try store.write { try $0.repository(Member.self).explain(#Predicate<Member> { $0.city == "Rome" }) }
            #expect(before.hasPrefix("read: scan of every Member"), "\(before)")
            #expect(store.version == version)
            // A read-only context keeps what it learned of the indexes for its version only.
            let reader = store.makeReadOnlyContext()
            defer { reader.discard() }
            let unbuilt = try reader.repository(Member.self).explain(#Predicate<Member> { $0.city == "Rome" })
            #expect(unbuilt.hasPrefix("read: scan of every Member"), "\(unbuilt)")
            // The first write builds every declared index.
            let plan = try store.write { unit in
                try unit.repository(Member.self).update(Member(id: 29, email: "p29@x", city: "Oslo", age: 49, nickname: nil))
                return try unit.repository(Member.self).explain(#Predicate<Member> { $0.city == "Rome" })
            }
            #expect(plan.hasPrefix("read: index city where city == Rome;"), "\(plan)")
            #expect(try reader.repository(Member.self).explain(#Predicate<Member> { $0.city == "Rome" }) == unbuilt)
            try reader.refresh()
            let refreshed = try reader.repository(Member.self).explain(#Predicate<Member> { $0.city == "Rome" })
            #expect(refreshed.hasPrefix("read: index city where city == Rome;"), "\(refreshed)")
            #expect(try store.makeContext().scan(prefix: [0xFE, UInt8(ascii: "i")]).count == 30 * Member.indexes.count)
            let rome = try store.makeContext().repository(Member.self).fetch(#Predicate<Member> { $0.city == "Rome" })
            #expect(rome.map(\.id) == Array(stride(from: 0, to: 30, by: 2)))
        }
    }

    @Test(arguments: Backend.allCases) func explainPrefersAUniqueIndexEquality(backend: Backend) async throws {
        try await backend.withStore { store throws in
            let plan = try store.write { unit in
                try unit.repository(Member.self).explain(#Predicate<Member> { $0.age > 30 && $0.email == "a@b" && $0.city == "Lima" })
            }
            #expect(plan.hasPrefix("read: unique index email where email == a@b;"), "\(plan)")
        }
    }
}
