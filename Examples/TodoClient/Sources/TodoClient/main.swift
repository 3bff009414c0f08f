// Runs the checks and exits non-zero when one fails.
import Strata

@MainActor
func check(_ condition: Bool, _ what: String) {
    if condition {
        print("ok: \(what)")
    } else {
        print("FAILED: \(what)")
        failures += 1
    }
}

var failures = 0

let store = try Store.inMemory()
let migrator = todoMigrator()
let rehearsal = try migrator.rehearse(store)
check(rehearsal.map(\.name) == migrator.names && store.version == 0, "rehearsing the migrations changed nothing")
check(try migrator.migrate(store) == migrator.names, "the migrations ran once each")
check(try migrator.migrate(store).isEmpty, "a second migrate runs none")

let model = TodoListModel(store: store)
let publisher = TodoEventPublisher(since: store.version)
let publishing = Task { try await publisher.run(store) }
let titlesModel = TodoTitlesModel()
titlesModel.follow(store)

model.pending = ["milk", "bread"]
let count = try await model.savePending()
check(count == 2 && model.saves == 1 && model.pending.isEmpty, "a unit of work from a @MainActor model saved 2 todos")

let importer = Importer(store: store)
let imported = try await importer.importTitles(["eggs", "tea", "jam"])
check(imported == 3, "a unit of work from an actor imported 3 todos, counting on the actor")

let versionBefore = store.version
model.pending = ["butter", "milk"]
do {
    _ = try await model.savePending()
    check(false, "a duplicate title is refused")
} catch let error as TitleTaken {
    check(error == TitleTaken(title: "milk"), "the body's own error is caught as its own type")
}
check(store.version == versionBefore, "nothing was committed by the failed unit of work")
check(try model.titles() == ["milk", "bread", "eggs", "tea", "jam"], "the store holds exactly the saved todos")
check(try await model.count() == 5, "an async read counts the saved todos")

// The observed list catches up with the durable commits, on the main actor.
let expected = ["milk", "bread", "eggs", "tea", "jam"]
var waited = 0
while titlesModel.titles != expected && waited < 500 {
    try await Task.sleep(for: .milliseconds(10))
    waited += 1
}
check(titlesModel.titles == expected && titlesModel.updates >= 2,
      "an observed list follows the store (\(titlesModel.updates) updates)")
titlesModel.stop()

// Domain events follow the commits: five todos created, then one completed and one removed.
try store.write { unit in
    let todos = unit.repository(Todo.self)
    guard var milk = try todos.first(#Predicate<Todo> { $0.title == "milk" }) else { throw TitleTaken(title: "milk") }
    milk.done = true
    try todos.update(milk)
    try unit.publish(TodoCompleted(title: milk.title))
    try todos.delete(5)
}
let expectedEvents: [TodoEvent] = ["milk", "bread", "eggs", "tea", "jam"].map(TodoEvent.created) + [.completed("milk"), .removed(5)]
waited = 0
while await publisher.events.count < expectedEvents.count && waited < 500 {
    try await Task.sleep(for: .milliseconds(10))
    waited += 1
}
check(await publisher.events == expectedEvents, "domain events were published after the commits, in order")
publishing.cancel()
let handled = await publisher.handledThrough
check(handled == store.version, "the publisher handled every commit through version \(handled)")

// The outbox: the completion's event reaches the notifier; a rolled-back unit's never does.
do {
    try store.write { unit in
        try unit.publish(TodoCompleted(title: "bread"))
        throw TitleTaken(title: "bread")
    }
} catch is TitleTaken {}
let notifier = CompletionNotifier()
let notifying = Task { try await notifier.run(store) }
waited = 0
while await notifier.notified.isEmpty && waited < 500 {
    try await Task.sleep(for: .milliseconds(10))
    waited += 1
}
try await Task.sleep(for: .milliseconds(50))
check(await notifier.notified == ["milk"], "the outbox delivered the completion's event, and nothing of a rolled-back unit")
notifying.cancel()
check(try store.read { try $0.eventConsumers() }.map(\.pending) == [0], "the notifier acknowledged what it was handed")

// A publisher started later resumes where the first one stopped.
try store.write { unit in try unit.repository(Todo.self).insert(Todo(id: 9, title: "jam")) }
let resumed = TodoEventPublisher(since: handled)
let resuming = Task { try await resumed.run(store) }
waited = 0
while await resumed.events.isEmpty && waited < 500 {
    try await Task.sleep(for: .milliseconds(10))
    waited += 1
}
check(await resumed.events == [.created("jam")], "a resumed publisher neither repeats nor misses an event")
resuming.cancel()

await model.trySavePending()
check(model.lastError == TitleTaken(title: "milk"), "a main-actor model keeps the error for its view")

var dumped = ""
dump(store, to: &dumped)
check(dumped.count < 2_000, "dump(store) is short (\(dumped.count) characters)")
print(dumped, terminator: "")

do {
    try store.write { unit in try unit.put(Array("k".utf8), Array("v".utf8)); try unit.put([0xFE], [1]) }
} catch let error as ContextError {
    check(error == .reservedKey, "Strata's own errors are typed: \(error.localizedDescription)")
}

try store.close()
if failures > 0 {
    print("\(failures) check(s) failed")
    exit(1)
}
print("all checks passed")
