// Where application code lives: a main-actor model and an actor. Each runs units of work
// whose bodies read and change the model's own state, which Swift 6 allows because the
// body runs on the caller's actor.
import Strata

@MainActor
final class TodoListModel {
    let store: Store
    var pending: [String] = []
    var saves = 0
    var lastError: TitleTaken?

    init(store: Store) { self.store = store }

    /// Saves every pending title as a todo in one unit of work; returns how many exist.
    func savePending() async throws -> Int {
        let count = try await store.write { unit in
            MainActor.assertIsolated("the body runs on the caller's actor")
            let todos = unit.repository(Todo.self)
            var next = try todos.count() + 1
            for title in self.pending {
                if try todos.first(#Predicate<Todo> { $0.title == title }) != nil { throw TitleTaken(title: title) }
                try todos.insert(Todo(id: next, title: title))
                next += 1
            }
            self.saves += 1
            return try todos.count()
        }
        pending.removeAll()
        return count
    }

    /// Like `savePending`, keeping the failure for the view instead of throwing it.
    func trySavePending() async {
        do {
            _ = try await savePending()
        } catch let error as TitleTaken {
            lastError = error
        } catch {
            fatalError("unexpected error: \(error)")
        }
    }

    /// The titles, read on the main actor (a read never waits for a sync, so it need not
    /// suspend; a body that awaits gets the async `read`).
    func titles() throws -> [String] {
        try store.read { context in
            try context.repository(Todo.self).fetch(sortBy: [SortDescriptor(\Todo.id)]).map(\.title)
        }
    }

    /// How many todos the store holds, read from async code: `try await store.read` with a
    /// body that does not suspend compiles without a warning (this package builds with
    /// every warning an error).
    func count() async throws -> Int {
        try await store.read { try $0.repository(Todo.self).count() }
    }
}

actor Importer {
    let store: Store
    var imported = 0

    init(store: Store) { self.store = store }

    /// Imports `titles` in one unit of work, with a nested unit per todo; counts on the actor.
    func importTitles(_ titles: [String]) async throws -> Int {
        try await store.write { unit in
            self.assertIsolated("the body runs on the caller's actor")
            let start = try unit.repository(Todo.self).count() + 1
            for (offset, title) in titles.enumerated() {
                try await unit.child { nested in
                    try nested.repository(Todo.self).insert(Todo(id: start + offset, title: title))
                }
                self.imported += 1
            }
            return self.imported
        }
    }
}

/// What a list view shows: the titles, kept current by observing the store. Each durable
/// commit that changes them sets `titles` on the main actor.
@MainActor
final class TodoTitlesModel {
    private(set) var titles: [String] = []
    private(set) var updates = 0
    private var following: Task<Void, any Error>?

    func follow(_ store: Store) {
        following = Task { @MainActor in
            for try await titles in store.observe({ context in
                try context.repository(Todo.self).fetch(sortBy: [SortDescriptor(\Todo.id)]).map(\.title)
            }) {
                MainActor.assertIsolated("observed values arrive on the consumer's actor")
                self.titles = titles
                self.updates += 1
            }
        }
    }

    func stop() { following?.cancel() }
}

/// The store's migrations: each step runs once, in its own unit of work.
func todoMigrator() -> Migrator {
    var migrator = Migrator()
    migrator.register("1 settings") { unit in try unit.put(Array("settings/theme".utf8), Array("light".utf8)) }
    migrator.register("2 index todos by title", Migrator.reindex(Todo.self))
    return migrator
}

/// What the rest of the application hears about todos, published after each durable commit.
enum TodoEvent: Equatable, Sendable {
    case created(String)
    case completed(String)
    case removed(Int)
}

/// Turns committed changes to todos into domain events, in commit order, from the typed
/// change feed. It remembers the last commit it handled whole, so a new publisher (after a
/// restart, say) resumes there and neither repeats nor misses an event.
actor TodoEventPublisher {
    private(set) var events: [TodoEvent] = []
    private(set) var handledThrough: UInt64

    init(since version: UInt64) { handledThrough = version }

    /// Publishes until the task is cancelled or the store closes.
    func run(_ store: Store) async throws {
        for try await change in try store.changes(of: Todo.self, since: handledThrough) {
            switch change.kind {
            case .inserted:
                if let todo = try change.record() { events.append(.created(todo.title)) }
            case .updated:
                if let todo = try change.record(), todo.done { events.append(.completed(todo.title)) }
            case .deleted:
                events.append(.removed(change.id))
            }
            if change.isLastOfCommit { handledThrough = change.version }
        }
    }
}

/// A domain event published through the outbox, in the unit of work that completed the todo:
/// it exists if and only if the completion was committed.
struct TodoCompleted: DomainEvent, Equatable {
    var title: String
}

/// Tells the user of completed todos: a durable consumer of `TodoCompleted` events, which
/// acknowledges each one after handling it, so a restart resumes after the last handled.
actor CompletionNotifier {
    private(set) var notified: [String] = []

    /// Notifies until the task is cancelled or the store closes.
    func run(_ store: Store) async throws {
        for try await delivery in store.events(of: TodoCompleted.self, consumer: "notifier") {
            notified.append(delivery.event.title)
            try await delivery.acknowledge()
        }
    }
}
