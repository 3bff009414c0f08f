// The application's record type and its own error.
import Strata

struct Todo: Record, Equatable {
    var id: Int
    var title: String
    var done = false

    static var indexes: [RecordIndex<Todo>] { [.index(\Todo.title)] }
}

/// A use case's own failure, thrown from the body of a unit of work.
struct TitleTaken: Error, Equatable {
    let title: String
}
