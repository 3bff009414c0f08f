// The record workloads: typed records with three secondary indexes (a unique email, a
// city shared by a hundred, an age shared by ~1,400) on Strata's repositories, next to
// GRDB (GRDBWorkloads.swift) and SQLite doing the same with an indexed table (`people(id INTEGER PRIMARY KEY, email TEXT
// UNIQUE, city TEXT, age INTEGER)` plus indexes on city and age, prepared statements, one
// transaction per batch). Every workload but records-insert runs after an untimed insert,
// and each read workload after one untimed query on each side: SQLite prepared its
// statements before it, and Strata's first `#Predicate` of a kind has the Swift runtime
// instantiate its expression types (about 3M instructions, once per process).
// Both sides hand back what an app gets, read field by field by hand: Strata's `Person`
// reads its record's fields (`RecordReadable`), and SQLite's rows are made into the same
// `Person` values (text columns read into Strings). Benchmarks/JOURNAL.md also gives
// Strata's numbers through `init(from:)`, `Codable`'s way.
//  - records-insert: insert N records, B per transaction (each also writes its index entries);
//  - records-fetch: N fetches of one record by its email;
//  - records-range: N / 100 queries (or --reads) of the 100 youngest in a five-year age
//    band, sorted by age (`age >= a && age < a + 5`, limit 100);
//  - records-count: the number of people in each of the 1,000 cities, N / 100 (or --reads)
//    times over the cities (`count(city == c)`; SQLite `SELECT count(*)`);
//  - records-update: N updates of a record's age and city by id, B per transaction.
// Every answer is checked. Expectation: CPU-bound (encoding, index maintenance, predicate
// evaluation, the records read).
import Strata
import StrataTesting
import CSQLite
import Foundation

struct Person: Record, Equatable {
    var id: Int
    var email: String
    var city: String
    var age: Int

    static var indexes: [RecordIndex<Person>] {
        [.index(\Person.email, unique: true), .index(\Person.city), .index(\Person.age)]
    }

    init(id: Int, email: String, city: String, age: Int) {
        self.id = id
        self.email = email
        self.city = city
        self.age = age
    }

    init(_ number: Int) {
        id = number
        email = "person\(number)@example.org"
        city = "city\(number % 1_000)"
        age = 18 + number % 70
    }

    /// The same person after an update: another city and age (both indexed).
    func moved() -> Person {
        var person = self
        person.city = "city\((id + 7) % 1_000)"
        person.age = 18 + (id + 3) % 70
        return person
    }
}

extension Person: RecordReadable {
    init(record: borrowing RecordReader) throws {
        id = try record.decode(Int.self, forKey: "id")
        email = try record.decode(String.self, forKey: "email")
        city = try record.decode(String.self, forKey: "city")
        age = try record.decode(Int.self, forKey: "age")
    }
}

struct RecordWorkloads {
    let engine: String
    let workload: String
    let options: StrataBench

    /// The workloads that only read, each a run of queries after one untimed warm-up query.
    static let reads: Set<String> = ["records-fetch", "records-range", "records-count"]
    /// The workloads on the library's authors and books (LibraryWorkloads.swift).
    static let library: Set<String> = ["records-relations", "records-sort-text"]

    /// The age bands of records-range: five years starting at 18 ... 82, in a fixed order.
    static func band(_ query: Int) -> Int { 18 + (query * 37) % 65 }

    func run() throws -> Result {
        let count = options.num ?? 100_000
        let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var order = Array(0..<count)
        var shuffler = SplitMix64(seed: options.seed)
        order.shuffle(using: &shuffler)
        // Each engine's store is closed when its function returns, before its files are measured.
        let (seconds, queries): (Double, Int)
        if engine == "grdb" {
            (seconds, queries) = try GRDBWorkloads(workload: workload, directory: directory, batch: options.batch, seed: options.seed)
                .run(count: count, order: order, timed: timed)
        } else if Self.library.contains(workload) {
            (seconds, queries) = (try runLibrary(directory: directory, count: count), Library(books: count, seed: options.seed).queries(workload))
        } else {
            (seconds, queries) = try runPeople(directory: directory, count: count, order: order)
        }
        return result(seconds: seconds, queries: queries, bytesOnDisk: StrataBench.directoryBytes(directory))
    }

    /// The workloads on people: `count` of them inserted in `order`. Returns the timed
    /// seconds and the operations they did.
    /// With `prepared`, a read workload's store is loaded and its queries handed back
    /// there instead of timed (`interleaved`), the store left open for them.
    private func runPeople(directory: String, count: Int, order: [Int],
                           prepared: UnsafeMutablePointer<Queries?>? = nil) throws -> (seconds: Double, queries: Int) {
        let queries = workload == "records-range" || workload == "records-count" ? options.reads ?? max(1, count / 100) : count
        let perCity = count / 1_000   // when count is a multiple of 1,000
        let seconds: Double
        if engine == "sqlite" {
            let table = try PeopleTable(directory: directory)
            defer { if prepared?.pointee == nil { table.close() } }
            if workload != "records-insert" { try table.insert(order, batch: options.batch) }
            /// Query `query` of a read workload.
            func read(_ query: Int) throws {
                switch workload {
                case "records-fetch":
                    let number = order[query]
                    guard try table.person(email: Person(number).email)?.id == number else {
                        throw BenchError(description: "sqlite did not find person \(number)")
                    }
                case "records-range":
                    let people = try table.youngest(from: Self.band(query), limit: 100)
                    try Self.checkBand(people.map(\.age), from: Self.band(query), engine: engine)
                default:
                    let found = try table.count(city: "city\(query % 1_000)")
                    guard count % 1_000 != 0 || found == perCity else { throw BenchError(description: "sqlite counted \(found)") }
                }
            }
            if let prepared {
                prepared.pointee = Queries(count: queries, run: { for query in $0 { try read(query) } }, close: table.close)
                return (0, queries)
            }
            if Self.reads.contains(workload) { try read(0) }   // the warm-up query, before the clock
            seconds = try timed {
                switch workload {
                case "records-insert": try table.insert(order, batch: options.batch)
                case "records-update": try table.update(order, batch: options.batch)
                default: for query in 0..<queries { try read(query) }
                }
            }
        } else {
            let store = try Store.open(path: directory, options: Workload.strataOptions(engine: engine))
            defer { if prepared?.pointee == nil { try? store.close() } }
            let insert = {
                for start in stride(from: 0, to: count, by: options.batch) {
                    try store.write { unit in
                        let people = unit.repository(Person.self)
                        for number in order[start..<min(count, start + options.batch)] { try people.insert(Person(number)) }
                    }
                }
            }
            if workload != "records-insert" { try insert() }
            /// Query `query` of a read workload, through `people`.
            func read(_ query: Int, _ people: Repository<Person>) throws {
                switch workload {
                case "records-fetch":
                    let number = order[query]
                    let email = Person(number).email
                    guard try people.first(#Predicate<Person> { $0.email == email })?.id == number else {
                        throw BenchError(description: "strata did not find person \(number)")
                    }
                case "records-range":
                    let from = Self.band(query), to = from + 5
                    let found = try people.fetch(#Predicate<Person> { $0.age >= from && $0.age < to },
                                                 sortBy: [SortDescriptor(\Person.age)], limit: 100)
                    try Self.checkBand(found.map(\.age), from: from, engine: engine)
                default:
                    let city = "city\(query % 1_000)"
                    let found = try people.count(#Predicate<Person> { $0.city == city })
                    guard count % 1_000 != 0 || found == perCity else { throw BenchError(description: "strata counted \(found)") }
                }
            }
            if let prepared {
                prepared.pointee = Queries(count: queries, run: { range in
                    try store.read { context in
                        let people = context.repository(Person.self)
                        for query in range { try read(query, people) }
                    }
                }, close: { try? store.close() })
                return (0, queries)
            }
            if Self.reads.contains(workload) {   // the warm-up query, before the clock
                try store.read { try read(0, $0.repository(Person.self)) }
            }
            seconds = try timed {
                switch workload {
                case "records-insert": try insert()
                case "records-update":
                    for start in stride(from: 0, to: count, by: options.batch) {
                        try store.write { unit in
                            let people = unit.repository(Person.self)
                            for number in order[start..<min(count, start + options.batch)] { try people.update(Person(number).moved()) }
                        }
                    }
                default:
                    try store.read { context in
                        let people = context.repository(Person.self)
                        for query in 0..<queries { try read(query, people) }
                    }
                }
            }
            if workload == "records-update" {
                // Verified after the clock: every record moved, and the city index followed.
                try store.read { context in
                    let people = context.repository(Person.self)
                    guard try people.get(order[0]) == Person(order[0]).moved(),
                          try people.count(#Predicate<Person> { $0.city == "city7" }) == Self.expectedIn(city: 7, count: count)
                    else { throw BenchError(description: "strata lost an update") }
                }
            }
        }
        return (seconds, queries)
    }

    /// The measurement of `queries` operations in `seconds`, with the store's bytes on disk
    /// after its close.
    private func result(seconds: Double, queries: Int, bytesOnDisk: Int) -> Result {
        let batched = workload == "records-insert" || workload == "records-update"
        return Result(engine: engine, bench: workload, num: queries, batch: batched ? options.batch : 1,
                      valueSize: 0, seconds: seconds, bytesOnDisk: bytesOnDisk, fdatasyncs: nil)
    }

    /// How many of `count` people live in `city` after every one of them moved.
    static func expectedIn(city: Int, count: Int) -> Int {
        (0..<count).count { Person($0).moved().city == "city\(city)" }
    }

    /// A records-range answer: 100 ages in the band, ascending.
    static func checkBand(_ ages: [Int], from: Int, engine: String) throws {
        guard ages.count == 100, ages.allSatisfy({ $0 >= from && $0 < from + 5 }), ages == ages.sorted() else {
            throw BenchError(description: "\(engine) answered \(ages.count) ages for the band from \(from)")
        }
    }

    func timed(_ body: () throws -> Void) throws -> Double {
        let elapsed = try ContinuousClock().measure(body)
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }
}

/// SQLite's side: an indexed table of people.
final class PeopleTable {
    private var db: OpaquePointer?
    private var insert: OpaquePointer?
    private var byEmail: OpaquePointer?
    private var byAge: OpaquePointer?
    private var countByCity: OpaquePointer?
    private var update: OpaquePointer?
    private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard sqlite3_open(directory + "/people.db", &db) == SQLITE_OK else { throw BenchError(description: "sqlite3_open failed") }
        for sql in ["PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                    "CREATE TABLE people (id INTEGER PRIMARY KEY, email TEXT UNIQUE, city TEXT, age INTEGER)",
                    "CREATE INDEX people_city ON people (city)", "CREATE INDEX people_age ON people (age)"] {
            try exec(sql)
        }
        insert = try prepare("INSERT INTO people (id, email, city, age) VALUES (?, ?, ?, ?)")
        byEmail = try prepare("SELECT id, email, city, age FROM people WHERE email = ?")
        byAge = try prepare("SELECT id, email, city, age FROM people WHERE age >= ? AND age < ? ORDER BY age LIMIT ?")
        countByCity = try prepare("SELECT count(*) FROM people WHERE city = ?")
        update = try prepare("UPDATE people SET city = ?, age = ? WHERE id = ?")
    }

    private func exec(_ sql: String) throws { try sqliteExec(db, sql) }

    private func prepare(_ sql: String) throws -> OpaquePointer? { try sqlitePrepare(db, sql) }

    func insert(_ numbers: [Int], batch: Int) throws {
        for start in stride(from: 0, to: numbers.count, by: batch) {
            try exec("BEGIN")
            for number in numbers[start..<min(numbers.count, start + batch)] {
                let person = Person(number)
                sqlite3_reset(insert)
                sqlite3_bind_int64(insert, 1, Int64(person.id))
                sqlite3_bind_text(insert, 2, person.email, -1, transient)
                sqlite3_bind_text(insert, 3, person.city, -1, transient)
                sqlite3_bind_int64(insert, 4, Int64(person.age))
                guard sqlite3_step(insert) == SQLITE_DONE else { throw BenchError(description: "sqlite insert failed") }
            }
            try exec("COMMIT")
        }
    }

    /// The person with `email`, built from the row as a record fetch decodes one.
    func person(email: String) throws -> Person? {
        sqlite3_reset(byEmail)
        sqlite3_bind_text(byEmail, 1, email, -1, transient)
        guard sqlite3_step(byEmail) == SQLITE_ROW else { return nil }
        return person(from: byEmail)
    }

    /// The first `limit` people aged `from ..< from + 5`, youngest first, each built from
    /// its row as a record fetch decodes whole records.
    func youngest(from: Int, limit: Int) throws -> [Person] {
        sqlite3_reset(byAge)
        sqlite3_bind_int64(byAge, 1, Int64(from))
        sqlite3_bind_int64(byAge, 2, Int64(from + 5))
        sqlite3_bind_int64(byAge, 3, Int64(limit))
        var people: [Person] = []
        while sqlite3_step(byAge) == SQLITE_ROW { people.append(person(from: byAge)) }
        return people
    }

    /// A `Person` from the current row of `id, email, city, age` (text read as any
    /// SQLite wrapper reads it: a String from the column's UTF-8).
    private func person(from statement: OpaquePointer?) -> Person {
        Person(id: Int(sqlite3_column_int64(statement, 0)),
               email: String(cString: sqlite3_column_text(statement, 1)),
               city: String(cString: sqlite3_column_text(statement, 2)),
               age: Int(sqlite3_column_int64(statement, 3)))
    }

    func count(city: String) throws -> Int {
        sqlite3_reset(countByCity)
        sqlite3_bind_text(countByCity, 1, city, -1, transient)
        guard sqlite3_step(countByCity) == SQLITE_ROW else { throw BenchError(description: "sqlite count failed") }
        return Int(sqlite3_column_int64(countByCity, 0))
    }

    /// Moves each person (`Person.moved`), `batch` per transaction.
    func update(_ numbers: [Int], batch: Int) throws {
        for start in stride(from: 0, to: numbers.count, by: batch) {
            try exec("BEGIN")
            for number in numbers[start..<min(numbers.count, start + batch)] {
                let person = Person(number).moved()
                sqlite3_reset(update)
                sqlite3_bind_text(update, 1, person.city, -1, transient)
                sqlite3_bind_int64(update, 2, Int64(person.age))
                sqlite3_bind_int64(update, 3, Int64(person.id))
                guard sqlite3_step(update) == SQLITE_DONE, sqlite3_changes(db) == 1 else {
                    throw BenchError(description: "sqlite update failed")
                }
            }
            try exec("COMMIT")
        }
    }

    func close() {
        sqlite3_finalize(insert)
        sqlite3_finalize(byEmail)
        sqlite3_finalize(byAge)
        sqlite3_finalize(countByCity)
        sqlite3_finalize(update)
        sqlite3_close(db)
    }
}

/// One engine's store loaded for a read workload: its queries, run a range at a time, and
/// how to close the store (`RecordWorkloads.interleaved`).
struct Queries {
    let count: Int
    let run: (Range<Int>) throws -> Void
    let close: () -> Void
}

extension RecordWorkloads {
    /// The workloads `--interleave` runs: those that only read.
    static let interleavable = reads.union(library)
    /// The engines `--interleave` runs (GRDB's workloads are timed their own way).
    static let interleavableEngines: Set<String> = ["strata", "strata-small", "sqlite"]

    /// `workload` on every engine of `engines` in this one process: each engine's store
    /// loaded (untimed) and queried once, then the queries run in turns of `slice`, the
    /// engine that goes first rotating from turn to turn, and each engine's turns timed and
    /// summed. This machine's speed drifts within a minute: a loop of string copies timed
    /// every five seconds took 0.245 to 0.448 s. Engines measured one after the other take
    /// that drift into their ratio; turns of a fraction of a second share it. Each of
    /// Strata's turns reads in a context of its own (one snapshot a turn, where a run alone
    /// reads every query in one). No peak RSS: the process holds every engine's store.
    static func interleaved(engines: [String], workload: String, slice: Int, options: StrataBench) throws -> [Result] {
        let count = options.num ?? 100_000
        var order = Array(0..<count)
        var shuffler = SplitMix64(seed: options.seed)
        order.shuffle(using: &shuffler)
        var loaded: [(runner: RecordWorkloads, directory: String, queries: Queries)] = []
        defer {
            for entry in loaded {
                entry.queries.close()
                try? FileManager.default.removeItem(atPath: entry.directory)
            }
        }
        for engine in engines {
            let runner = RecordWorkloads(engine: engine, workload: workload, options: options)
            let directory = (options.dir as NSString).appendingPathComponent("strata-bench-\(UUID().uuidString)")
            var prepared: Queries?
            do {
                if library.contains(workload) {
                    _ = try runner.runLibrary(directory: directory, count: count, prepared: &prepared)
                } else {
                    _ = try runner.runPeople(directory: directory, count: count, order: order, prepared: &prepared)
                }
            } catch {
                try? FileManager.default.removeItem(atPath: directory)
                throw error
            }
            guard let queries = prepared else { throw BenchError(description: "\(engine) \(workload) cannot be interleaved") }
            loaded.append((runner, directory, queries))
            try queries.run(0..<1)   // the warm-up query, before the clock
        }
        var seconds = [Double](repeating: 0, count: loaded.count)
        let total = loaded.first?.queries.count ?? 0
        try Turns.run(total: total, slice: slice, engines: loaded.count) { index, range in
            seconds[index] += try loaded[index].runner.timed { try loaded[index].queries.run(range) }
        }
        var results: [Result] = []
        for (index, entry) in loaded.enumerated() {
            entry.queries.close()
            results.append(entry.runner.result(seconds: seconds[index], queries: total, bytesOnDisk: StrataBench.directoryBytes(entry.directory)))
            try? FileManager.default.removeItem(atPath: entry.directory)
        }
        loaded.removeAll()
        return results
    }
}
