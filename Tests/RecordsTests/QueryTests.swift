import Strata
import StrataTesting
import Foundation
import TestBackends
import Testing

@Suite struct QueryTests {
    static let books = makeBooks(300, seed: 11)

    /// A store on `backend` holding `books`, inserted a hundred per unit of work (within
    /// etcd's transaction limit).
    static func store(_ backend: Backend) async throws -> Store {
        let store = try await backend.makeStore()
        for start in stride(from: 0, to: books.count, by: 100) {
            try await store.write { unit in
                for book in books[start..<min(start + 100, books.count)] { try unit.repository(Book.self).insert(book) }
            }
        }
        return store
    }

    /// Each predicate is checked against filtering the same array with the same predicate.
    static let predicates: [(String, Predicate<Book>)] = {
        let author = "Borges"
        let word = "river"
        return [
            ("equality", #Predicate<Book> { $0.author == author }),
            ("and", #Predicate<Book> { $0.author == "Calvino" && $0.year > 1980 }),
            ("or", #Predicate<Book> { $0.year < 1960 || $0.price >= 35 }),
            ("not", #Predicate<Book> { !($0.author == "Morrison") }),
            ("string contains", #Predicate<Book> { $0.title.contains(word) }),
            ("optional present", #Predicate<Book> { $0.subtitle != nil }),
            ("optional value", #Predicate<Book> { $0.subtitle == "part 2" }),
            ("array contains", #Predicate<Book> { $0.tags.contains("classic") }),
            ("id equality", #Predicate<Book> { $0.id == 87 }),
            ("id range", #Predicate<Book> { $0.id >= 0 && $0.id < 120 && $0.year != 1999 }),
            ("id range flipped", #Predicate<Book> { 300 < $0.id }),
            ("id missing", #Predicate<Book> { $0.id == 1 }),
        ]
    }()

    @Test(arguments: Backend.allCases, 0..<12)
    func fetchMatchesFilteringAnArray(backend: Backend, index: Int) async throws {
        let (name, predicate) = Self.predicates[index]
        print("QueryTests: books of seed 11, page of seed \(index), predicate \(name)")
        let store = try await Self.store(backend)
        defer { try? store.close() }
        let repository = store.makeContext().repository(Book.self)
        let expected = try Self.books.filter { try predicate.evaluate($0) }.sorted { $0.id < $1.id }
        #expect(try repository.fetch(predicate) == expected, "\(name)")
        #expect(try repository.count(predicate) == expected.count, "\(name)")
        // Sorting, offset and limit as an array would do them.
        let sort = [SortDescriptor(\Book.year, order: .reverse), SortDescriptor(\Book.id)]
        var random = SplitMix64(seed: UInt64(index))
        let offset = Int(random.next() % 5)
        let limit = Int(random.next() % 20)
        let page = Array(expected.sorted(using: sort).dropFirst(offset).prefix(limit))
        #expect(try repository.fetch(predicate, sortBy: sort, limit: limit, offset: offset) == page, "\(name), seed \(index)")
        #expect(try repository.first(predicate, sortBy: sort) == expected.sorted(using: sort).first, "\(name)")
    }

    @Test(arguments: Backend.allCases)
    func aNegativeOffsetOrLimitIsAClearError(backend: Backend) async throws {
        let store = try await Self.store(backend)
        defer { try? store.close() }
        let repository = store.makeContext().repository(Book.self)
        #expect(throws: RecordError.invalidQuery("offset -1 and limit none must not be negative")) {
            try repository.fetch(offset: -1)
        }
        #expect(throws: RecordError.self) { try repository.fetch(limit: -2) }
        #expect(try repository.fetch(limit: 0).isEmpty)
    }

    @Test(arguments: Backend.allCases)
    func explainShowsTheKeyAccessAndTheResidualFilter(backend: Backend) async throws {
        let store = try await Self.store(backend)
        defer { try? store.close() }
        let repository = store.makeContext().repository(Book.self)
        #expect(try repository.explain(#Predicate<Book> { $0.id == 87 }).hasPrefix("read: point lookup of Book id 87;"))
        let range = try repository.explain(#Predicate<Book> { $0.id >= 0 && $0.id < 120 && $0.year != 1999 })
        #expect(range.hasPrefix("read: key range of Book ids where id >= 0 and id < 120;"), "\(range)")
        #expect(range.contains("evaluate on each candidate"))
        let scan = try repository.explain(#Predicate<Book> { $0.id == 3 || $0.year > 2000 })
        #expect(scan.hasPrefix("read: scan of every Book;"), "\(scan)")
        #expect(try repository.explain() == "read: scan of every Book; no filter")
    }
}
