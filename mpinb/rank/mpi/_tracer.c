/* The traced calls' hot path in C: mpinb's tracer below the interpreter.
 *
 * Each traced communicator class gets, in place of its Python methods for the calls below,
 * method descriptors of the type ``Method`` defined here (Python's fastest way to call C with
 * ``self``). One call:
 *   - reads its arguments as mpi4py does for the common case (one buffer object, or an object to
 *     pickle), and otherwise hands the whole call to the Python method it stands for (``fallback``),
 *     which is today's Python tracer, so every other form stays exactly mpi4py's;
 *   - posts the nonblocking form and tests it; if it is not done, it spins on MPI_Test with the
 *     GIL released for ``spin`` seconds (yielding the core every 32 tests, as MPICH's own waits
 *     do), and if it is still not done, hands the request to Python (``_native.finish``), whose
 *     polled wait handles signals, describes the wait to the notebook and abandons the request
 *     on an interrupt (the buffer stays alive in a ``Held`` object for as long as MPI may use it);
 *   - records the call, when recording is on, as one C struct in this module's event buffer: the
 *     caller's code object and instruction offset (the line is looked up when the run ends), the
 *     communicator's id, peer, tag, bytes and the three times of the event schema (mpinb.common._events).
 *
 * Python's own traced calls append their event objects to the same buffer (``add``), so a run's
 * events stay in call order; ``drain`` returns them as the schema's tuples.
 *
 * Built against the MPI that mpi4py loaded (mpinb/common/_tracer_build.py builds it with that MPI's mpicc);
 * handles come from mpi4py's C API, so they are that MPI's own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* mpi4py's C API (PyMPIComm_Get and friends), filled in by import_mpi4py__MPI(). */
#include "mpi4py/mpi4py.h"

/* Which MPI's headers this was built with: mpi4py's build for that MPI must be the one loaded. */
#if defined(I_MPI_VERSION)
#define MPI_VENDOR "Intel MPI"
#elif defined(OPEN_MPI) && OPEN_MPI
#define MPI_VENDOR "Open MPI"
#elif defined(MPICH_NAME)
#define MPI_VENDOR "MPICH"
#else
#define MPI_VENDOR "unknown"
#endif

enum { SEND = 0, RECV = 1, COLLECTIVE = 2 };            /* mpinb.common._events kinds */
enum { DO_SEND, DO_RECV, DO_SEND_OBJECT, DO_RECV_OBJECT, DO_COLLECTIVE };

/* ---- clock: time.perf_counter()'s (CLOCK_MONOTONIC on Linux) ---------------------------- */
static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the event buffer --------------------------------------------------------------------- */
typedef struct {
    PyObject *object;        /* an event made in Python (tuple or list), or NULL: the fields */
    PyObject *op;            /* the mpi4py method's name (a strong reference) */
    PyObject *comm;          /* the communicator's id */
    PyObject *code;          /* the caller's code object, or NULL */
    int kind, peer, tag, where; /* where: instruction offset (3.11+) or line */
    long long sent, received;
    double start, end, returned;
} Event;

static Event *events = NULL;
static Py_ssize_t n_events = 0, allocated = 0, capacity = 100000, dropped = 0;
static int recording = 0;

static Event *new_event(void) {
    if (n_events >= capacity) {
        dropped++;
        return NULL;
    }
    if (n_events == allocated) {
        Py_ssize_t more = allocated ? allocated * 2 : 1024;
        if (more > capacity) more = capacity;
        Event *grown = PyMem_Realloc(events, (size_t)more * sizeof(Event));
        if (grown == NULL) {
            dropped++;
            return NULL;
        }
        events = grown;
        allocated = more;
    }
    Event *e = &events[n_events++];
    memset(e, 0, sizeof(Event));
    return e;
}

static void clear_events(void) {
    for (Py_ssize_t i = 0; i < n_events; i++) {
        Py_CLEAR(events[i].object);
        Py_CLEAR(events[i].op);
        Py_CLEAR(events[i].comm);
        Py_CLEAR(events[i].code);
    }
    n_events = 0;
}

static int position(PyFrameObject *frame) {
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetLasti(frame);
#else
    return PyFrame_GetLineNumber(frame);
#endif
}

static int line_of(PyObject *code, int where) {
    if (code == NULL) return 0;
#if PY_VERSION_HEX >= 0x030B0000
    return where < 0 ? ((PyCodeObject *)code)->co_firstlineno : PyCode_Addr2Line((PyCodeObject *)code, where);
#else
    return where;
#endif
}

static PyObject *file_of(PyObject *code) {
    if (code == NULL) return PyUnicode_FromString("");
    return PyObject_GetAttrString(code, "co_filename");
}

/* ---- library code: a call made there is told at the user's line that led to it ------------ */
static PyObject *library_roots = NULL;  /* path prefixes of library code (_calls.LIBRARY_ROOTS) */
static PyObject *via = NULL;            /* the recorder's dict: (file, line) -> (library file, line) */
#define CODE_CACHE 64
static PyObject *cached_code[CODE_CACHE];  /* strong references: no other code takes a cached address */
static char cached_in_library[CODE_CACHE];

static int in_library(PyObject *code) {
    size_t slot = ((uintptr_t)code >> 4) & (CODE_CACHE - 1);
    if (cached_code[slot] == code) return cached_in_library[slot];
    int found = 0;
    PyObject *file = ((PyCodeObject *)code)->co_filename;
    for (Py_ssize_t i = 0; library_roots != NULL && i < PyTuple_GET_SIZE(library_roots) && !found; i++)
        found = PyUnicode_Tailmatch(file, PyTuple_GET_ITEM(library_roots, i), 0, PY_SSIZE_T_MAX, -1) == 1;
    Py_INCREF(code);
    Py_XSETREF(cached_code[slot], code);
    cached_in_library[slot] = (char)found;
    return found;
}

/* Note the library line behind a user's line, once (no Python runs here: an interrupt cannot
 * arrive in the middle; a failed allocation only loses the note). */
static void note_via(PyObject *code, int where, PyObject *library_code, int library_where) {
    PyObject *file = file_of(code), *library_file = file_of(library_code);
    PyObject *key = file ? Py_BuildValue("(Oi)", file, line_of(code, where)) : NULL;
    PyObject *value = library_file ? Py_BuildValue("(Oi)", library_file, line_of(library_code, library_where)) : NULL;
    if (key == NULL || value == NULL || PyDict_SetDefault(via, key, value) == NULL) PyErr_Clear();
    Py_XDECREF(file);
    Py_XDECREF(library_file);
    Py_XDECREF(key);
    Py_XDECREF(value);
}

/* The innermost frame outside library code, from ``frame`` (in a library) out: its code and
 * position; ``code`` itself where no user code is on the stack (a library's own thread). */
static PyObject *outside_libraries(PyFrameObject *frame, PyObject *code, int *where) {
    PyFrameObject *outer = PyFrame_GetBack(frame);  /* new references from here on */
    while (outer != NULL) {
        PyObject *outer_code = (PyObject *)PyFrame_GetCode(outer);
        if (!in_library(outer_code)) {
            int outer_where = position(outer);
            Py_DECREF(outer);
            if (via != NULL) note_via(outer_code, outer_where, code, *where);
            Py_DECREF(code);
            *where = outer_where;
            return outer_code;
        }
        Py_DECREF(outer_code);
        PyFrameObject *next = PyFrame_GetBack(outer);
        Py_DECREF(outer);
        outer = next;
    }
    return code;
}

/* The caller's code object and position: a strong reference to the code, or NULL. A call made
 * in library code (mpi4py.futures, the standard library) is the user's line that led to it. */
static PyObject *caller(int *where) {
    PyFrameObject *frame = PyEval_GetFrame();  /* borrowed: the Python frame that called us */
    *where = 0;
    if (frame == NULL) return NULL;
    *where = position(frame);
    PyObject *code = (PyObject *)PyFrame_GetCode(frame);
    return in_library(code) ? outside_libraries(frame, code, where) : code;
}

static void record(PyObject *op, int kind, PyObject *comm, int peer, int tag, long long sent,
                   long long received, double start, double end, PyObject *code, int where) {
    Event *e = new_event();
    if (e == NULL) {
        Py_XDECREF(code);
        return;
    }
    Py_INCREF(op);
    e->op = op;
    Py_XINCREF(comm);
    e->comm = comm;
    e->code = code;  /* the reference caller() gave */
    e->kind = kind;
    e->peer = peer;
    e->tag = tag;
    e->where = where;
    e->sent = sent;
    e->received = received;
    e->start = start;
    e->end = e->returned = end;
}

/* ---- what the Python side gives us (configure) --------------------------------------------- */
static PyObject *mpi_exception = NULL;   /* MPI.Exception */
static PyObject *pickle_dumps = NULL;    /* MPI.pickle.dumps, as mpi4py's send uses it */
static PyObject *pickle_loads = NULL;
static PyObject *typedict = NULL;        /* MPI._typedict: buffer format -> Datatype */
static PyObject *finish = NULL;          /* _native.finish(request, status, held, comm, op, ...) */
static PyObject *receive_object = NULL;  /* _native.receive_object(comm, op, source, tag, status, ...) */
static PyObject *agreement = NULL;       /* _collectives.agreement_channel(comm) -> (shadow, tag) or None */
static PyObject *finish_round = NULL;    /* _native.finish_round(receive, send, held, comm, op, root, ...) */
static PyObject *disagreed = NULL;       /* _collectives.disagreed(comm, op, root, file, line, code) */
static PyObject *rehearse = NULL;        /* _collectives.rehearse(comm, blocking, *args, **kwargs) */
static PyObject *str_mpinb_id = NULL;
static double spin_seconds = 0.01;
static int polls_before_yield = 32;
static int whole_on_arrival = 4096;

static int raise_mpi(int ierr) {
    PyObject *code = PyLong_FromLong(ierr);
    if (code == NULL) return -1;
    PyObject *exc = PyObject_CallOneArg(mpi_exception, code);
    Py_DECREF(code);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

/* ---- Held: a buffer kept alive while MPI may use it ---------------------------------------- */
typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int has_view;
    PyObject *object;  /* what else to keep (the pickle) */
} Held;

static void Held_dealloc(Held *self) {
    if (self->has_view) PyBuffer_Release(&self->view);
    Py_XDECREF(self->object);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject HeldType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpinb.rank.mpi._tracer.Held",
    .tp_basicsize = sizeof(Held),
    .tp_dealloc = (destructor)Held_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A buffer that a pending MPI request still uses.",
};

static PyObject *hold(Py_buffer *view, PyObject *object) {
    Held *held = PyObject_New(Held, &HeldType);
    if (held == NULL) return NULL;
    held->view = *view;  /* takes over the view: the caller must not release it */
    held->has_view = 1;
    Py_XINCREF(object);
    held->object = object;
    return (PyObject *)held;
}

/* ---- buffers as mpi4py reads a bare buffer object (msgbuffer.pxi's message_simple) --------- */
typedef struct {
    char format[16];
    MPI_Datatype type;
    MPI_Aint extent;
} Known;

static Known known[64];
static int n_known = 0;

/* The datatype for a buffer format, as mpi4py's getdatatype(); 0 where mpi4py might say
 * something else (an unknown format, a foreign byte order): the caller then falls back. */
static int datatype_of(const char *format, MPI_Datatype *type, MPI_Aint *extent) {
    if (format == NULL || strcmp(format, "B") == 0) {
        *type = MPI_BYTE;
        *extent = 1;
        return 1;
    }
    const char *key = format;
    const int little = 1;
    int is_little = *(const char *)&little == 1;
    if (key[0] == '@') key++;
    else if (key[0] == '<') {
        if (!is_little) return 0;
        key++;
    } else if (key[0] == '>') {
        if (is_little) return 0;
        key++;
    }
    for (int i = 0; i < n_known; i++) {
        if (strcmp(known[i].format, key) == 0) {
            *type = known[i].type;
            *extent = known[i].extent;
            return 1;
        }
    }
    if (strlen(key) >= sizeof(known[0].format) || n_known == (int)(sizeof(known) / sizeof(known[0])))
        return 0;
    PyObject *found = PyDict_GetItemString(typedict, key);  /* borrowed */
    if (found == NULL) return 0;
    MPI_Datatype *handle = PyMPIDatatype_Get(found);
    if (handle == NULL) {
        PyErr_Clear();
        return 0;
    }
    MPI_Aint lb, ext;
    if (MPI_Type_get_extent(*handle, &lb, &ext) != MPI_SUCCESS || ext <= 0) return 0;
    strcpy(known[n_known].format, key);
    known[n_known].type = *handle;
    known[n_known].extent = ext;
    n_known++;
    *type = *handle;
    *extent = ext;
    return 1;
}

/* A bare buffer object (not a list or tuple spec), as mpi4py takes it: 1 with the view, the
 * datatype and the count; 0 (no error set) where mpi4py's own parsing must decide. */
static int simple_buffer(PyObject *obj, int writable, Py_buffer *view, MPI_Datatype *type, int *count) {
    if (PyList_Check(obj) || PyTuple_Check(obj) || !PyObject_CheckBuffer(obj)) return 0;
    int flags = PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        return 0;
    }
    MPI_Aint extent;
    if (!datatype_of(view->format, type, &extent) || view->len % extent != 0 || view->len / extent > INT_MAX) {
        PyBuffer_Release(view);
        return 0;
    }
    *count = (int)(view->len / extent);
    return 1;
}

/* ---- waiting ------------------------------------------------------------------------------- */
/* ``test(what, &flag)`` (an MPI test) once, then spinning on it with the GIL released, yielding
 * the core every ``polls_before_yield`` tests, for ``spin`` seconds at most; 1 when done, 0 when
 * still pending after the spin, -1 on an MPI error (``*ierr``). */
typedef int (*Test)(void *what, int *flag);

static int spin(Test test, void *what, int *ierr) {
    int flag = 0;
    *ierr = test(what, &flag);
    if (*ierr != MPI_SUCCESS) return -1;
    if (flag) return 1;
    Py_BEGIN_ALLOW_THREADS
    double began = now();
    int polls = 0;
    while (1) {
        *ierr = test(what, &flag);
        if (flag || *ierr != MPI_SUCCESS) break;
        if (++polls % polls_before_yield == 0) {
            sched_yield();
            if (now() - began >= spin_seconds) break;
        }
    }
    Py_END_ALLOW_THREADS
    if (*ierr != MPI_SUCCESS) return -1;
    return flag;
}

typedef struct { MPI_Request *request; MPI_Status *status; } OneRequest;
static int test_one(void *what, int *flag) {
    OneRequest *one = what;
    return MPI_Test(one->request, flag, one->status);
}

/* A request's end: spin() on MPI_Test. */
static int settle(MPI_Request *request, MPI_Status *status, int *ierr) {
    OneRequest one = {request, status};
    return spin(test_one, &one, ierr);
}

static int test_pair(void *what, int *flag) {
    return MPI_Testall(2, (MPI_Request *)what, flag, MPI_STATUSES_IGNORE);
}

/* The two requests of one round of an agreement: spin() on MPI_Testall. */
static int settle_pair(MPI_Request *pair, int *ierr) {
    return spin(test_pair, pair, ierr);
}

typedef struct { int source, tag; MPI_Comm comm; MPI_Message *message; MPI_Status *status; } Probe;
static int test_probe(void *what, int *flag) {
    Probe *p = what;
    return MPI_Improbe(p->source, p->tag, p->comm, flag, p->message, p->status);
}

/* A matched probe: spin() on MPI_Improbe. */
static int probe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status, int *ierr) {
    Probe p = {source, tag, comm, message, status};
    return spin(test_probe, &p, ierr);
}

/* ---- what a reduction's rehearsal depends on ------------------------------------------------
 * A traced reduction that runs as the blocking call (Open MPI's, Intel MPI's) is first tried on a
 * revoked copy of its communicator (_collectives.rehearse): a call into Python that raises and
 * catches MPI's refusal, a few microseconds of CPU per call, which more ranks than cores turn into
 * several times that in waiting. Whether MPI and mpi4py accept the arguments depends only on the
 * communicator (its handle, size, rank and kind) and on what each argument is: its type; for a
 * buffer, its address, layout, format and writability; an int's value; an operation's handle.
 * A call whose arguments match, in all of these, a call that passed its
 * rehearsal is not tried again. Any other kind of argument (a [buffer, datatype] list, a DLPack
 * array without the buffer protocol, ...) is tried every time. */
enum { KEYED_ARGUMENTS = 6, KEYED_DIMENSIONS = 4, KEYED_FORMAT = 16, CALLS_KEPT = 4 };

typedef struct {
    PyTypeObject *type;  /* held by a kept key, so that its address cannot stand for another type */
    void *buf;
    Py_ssize_t len, itemsize, shape[KEYED_DIMENSIONS], strides[KEYED_DIMENSIONS];
    int readonly, ndim;
    char format[KEYED_FORMAT];
    long long value;     /* an int's value, or an operation's handle's bytes */
} ArgumentKey;

typedef struct {
    int kept;
    MPI_Comm comm;
    int size, rank, inter;
    PyObject *kwnames;   /* held by a kept key */
    Py_ssize_t count;
    ArgumentKey arguments[KEYED_ARGUMENTS];
} CallKey;

/* ---- Method: a traced call, as a method descriptor ----------------------------------------- */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *name;       /* "Send" */
    PyObject *fallback;   /* the Python tracer's method: every form this path does not take */
    PyObject *polled;     /* for collectives: mpi4py's nonblocking method ("Iallreduce") */
    PyObject *blocking;   /* or its blocking one, called once the members agree (see agree) */
    int agreed_code;      /* the call's number in the agreement (_collectives.agreed_code) */
    int speculative;      /* entered ahead of the members where the pool has a board (see speculate) */
    PyObject *doc;
    int action;
    int root_at;          /* collectives: the root's position, or -1 */
    int bcast;
    CallKey passed[CALLS_KEPT];  /* the last calls whose rehearsal passed (see CallKey) */
    int next_passed;
} Method;

static PyObject *call_fallback(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(m->fallback, args, nargsf, kwnames);
}

/* Argument ``position`` (0 = the first after self) or keyword ``name``; borrowed, or NULL. */
static PyObject *argument(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t position,
                          const char *name) {
    if (position < nargs) return args[position];
    if (kwnames != NULL) {
        Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), name) == 0)
                return args[nargs + i];
        }
    }
    return NULL;
}

/* Whether the keywords are all among ``allowed`` (else mpi4py's own call says what is wrong). */
static int keywords_known(PyObject *kwnames, const char *const *allowed) {
    if (kwnames == NULL) return 1;
    Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), *a) == 0) ok = 1;
        if (!ok) return 0;
    }
    return 1;
}

static int small_int(PyObject *obj, int fallback_value, int *out) {
    if (obj == NULL) {
        *out = fallback_value;
        return 1;
    }
    if (!PyLong_CheckExact(obj)) return 0;
    int overflow = 0;
    long value = PyLong_AsLongAndOverflow(obj, &overflow);
    if (overflow || value < INT_MIN || value > INT_MAX) return 0;
    *out = (int)value;
    return 1;
}

/* Whether the user revoked the communicator (ULFM): then MPI's own call says ERR_REVOKED, where
 * a polled form may not, so the Python path (which gives way to it) takes the call. Only Open
 * MPI's fault-tolerance extension can revoke; mpi4py's Is_revoked says False everywhere else. */
static int is_revoked(PyObject *self) {
#ifdef OMPI_HAVE_MPI_EXT_FTMPI
    MPI_Comm *comm = PyMPIComm_Get(self);
    int flag = 0;
    if (comm == NULL) {
        PyErr_Clear();
        return 0;
    }
    return MPIX_Comm_is_revoked(*comm, &flag) == MPI_SUCCESS && flag;
#else
    (void)self;
    return 0;
#endif
}

/* Hand a pending request to Python's polled wait; returns 0 when it completed, -1 on error. */
static int finish_in_python(Method *m, PyObject *self, MPI_Request request, MPI_Status *status, PyObject *held,
                            const char *kind, int peer, int tag, long long size, PyObject *code, int where,
                            int cancel) {
    PyObject *request_obj = PyMPIRequest_New(request);
    PyObject *status_obj = PyMPIStatus_New(status);
    PyObject *file = file_of(code);
    if (request_obj == NULL || status_obj == NULL || file == NULL) {
        Py_XDECREF(request_obj);
        Py_XDECREF(status_obj);
        Py_XDECREF(file);
        Py_XDECREF(held);
        return -1;
    }
    PyObject *done = PyObject_CallFunction(finish, "OOOOOsiiLOii", request_obj, status_obj, held ? held : Py_None,
                                           self, m->name, kind, peer, tag, size, file, line_of(code, where), cancel);
    Py_XDECREF(held);
    Py_DECREF(file);
    int ok = done != NULL;
    Py_XDECREF(done);
    if (ok) *status = *PyMPIStatus_Get(status_obj);
    Py_DECREF(request_obj);
    Py_DECREF(status_obj);
    return ok ? 0 : -1;
}

static PyObject *comm_id(PyObject *self) {
    return PyObject_GetAttr(self, str_mpinb_id);  /* a new reference, or NULL */
}

/* Record the call if recording is on; takes over ``code``. -1 (an exception set) on failure. */
static int record_call(Method *m, PyObject *self, int kind, int peer, int tag, long long sent, long long received,
                       double start, PyObject *code, int where) {
    if (!recording) {
        Py_XDECREF(code);
        return 0;
    }
    PyObject *cid = comm_id(self);
    if (cid == NULL) {
        Py_XDECREF(code);
        return -1;
    }
    record(m->name, kind, cid, peer, tag, sent, received, start, now(), code, where);
    Py_DECREF(cid);
    return 0;
}

/* A posted send's end: done at once, or finished by Python's polled wait (``keep`` and the view
 * then stay alive with the request); recorded. Releases the view and takes over ``code``. */
static PyObject *end_send(Method *m, PyObject *self, MPI_Request request, int done, Py_buffer *view, PyObject *keep,
                          int dest, int tag, long long size, double start, PyObject *code, int where) {
    MPI_Status status;
    if (done) {
        PyBuffer_Release(view);
    } else {
        PyObject *held = hold(view, keep);
        if (held == NULL || finish_in_python(m, self, request, &status, held, "send", dest, tag, size, code,
                                             where, 0) < 0) {
            Py_XDECREF(code);
            return NULL;
        }
    }
    if (record_call(m, self, SEND, dest, tag, size, 0, start, code, where) < 0) return NULL;
    Py_RETURN_NONE;
}

/* What a Send or Recv needs once its arguments are read: the buffer as mpi4py takes it, the
 * communicator and the caller. 1: go on; 0: mpi4py's own parsing must decide (nothing held);
 * -1: an error is set. */
static int begin_buffer_call(PyObject *self, PyObject *buf, int writable, Py_buffer *view, MPI_Datatype *type,
                             int *count, MPI_Comm **comm, PyObject **code, int *where) {
    if (!simple_buffer(buf, writable, view, type, count)) return 0;
    *comm = PyMPIComm_Get(self);
    if (*comm == NULL) {
        PyBuffer_Release(view);
        return -1;
    }
    *code = caller(where);
    return 1;
}

static const char *const SEND_KEYWORDS[] = {"buf", "dest", "tag", NULL};
static const char *const RECV_KEYWORDS[] = {"buf", "source", "tag", "status", NULL};
static const char *const SENDOBJ_KEYWORDS[] = {"obj", "dest", "tag", NULL};

static PyObject *do_send(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *self = args[0];
    int dest, tag;
    PyObject *buf = argument(args + 1, nargs - 1, kwnames, 0, "buf");
    if (nargs > 4 || buf == NULL || !keywords_known(kwnames, SEND_KEYWORDS)
        || !small_int(argument(args + 1, nargs - 1, kwnames, 1, "dest"), MPI_PROC_NULL, &dest)
        || !small_int(argument(args + 1, nargs - 1, kwnames, 2, "tag"), 0, &tag)
        || argument(args + 1, nargs - 1, kwnames, 1, "dest") == NULL || dest == MPI_PROC_NULL || is_revoked(self))
        return call_fallback(m, args, nargsf, kwnames);
    Py_buffer view;
    MPI_Datatype type;
    int count, where;
    MPI_Comm *comm;
    PyObject *code;
    int go = begin_buffer_call(self, buf, 0, &view, &type, &count, &comm, &code, &where);
    if (go <= 0) return go < 0 ? NULL : call_fallback(m, args, nargsf, kwnames);
    long long size = view.len;
    double start = now();
    MPI_Request request;
    int ierr = MPI_Isend(view.buf, count, type, dest, tag, *comm, &request);
    if (ierr != MPI_SUCCESS) {
        PyBuffer_Release(&view);
        Py_XDECREF(code);
        return raise_mpi(ierr), NULL;
    }
    MPI_Status status;
    int done = settle(&request, &status, &ierr);
    if (done < 0) {
        PyBuffer_Release(&view);
        Py_XDECREF(code);
        return raise_mpi(ierr), NULL;
    }
    return end_send(m, self, request, done, &view, NULL, dest, tag, size, start, code, where);
}

/* Bytes a status says arrived, also beyond an int's range (MPI_Get_elements_x is MPI 3.0). */
static long long received_bytes(MPI_Status *status) {
    MPI_Count count = 0;
    if (MPI_Get_elements_x(status, MPI_BYTE, &count) != MPI_SUCCESS || count == MPI_UNDEFINED) return 0;
    return (long long)count;
}

/* ``size`` bytes as (count, datatype): MPI_BYTE while the count fits an int, else a committed
 * datatype of 1 GiB blocks and the rest (count 1), as mpi4py's large-count emulation on MPI 3.
 * *made is 1 when the caller must free the datatype. */
static int bytes_as(long long size, int *count, MPI_Datatype *type, int *made) {
    *made = 0;
    if (size <= INT_MAX) {
        *count = (int)size;
        *type = MPI_BYTE;
        return MPI_SUCCESS;
    }
    const long long block = 1LL << 30;
    MPI_Datatype blocks, rest = MPI_BYTE, parts[2];
    int ierr = MPI_Type_contiguous((int)block, MPI_BYTE, &blocks);
    if (ierr != MPI_SUCCESS) return ierr;
    int lengths[2] = {(int)(size / block), (int)(size % block)};
    MPI_Aint offsets[2] = {0, (MPI_Aint)((size / block) * block)};
    parts[0] = blocks;
    parts[1] = rest;
    ierr = MPI_Type_create_struct(2, lengths, offsets, parts, type);
    MPI_Type_free(&blocks);
    if (ierr == MPI_SUCCESS) ierr = MPI_Type_commit(type);
    if (ierr != MPI_SUCCESS) return ierr;
    *count = 1;
    *made = 1;
    return MPI_SUCCESS;
}

static int user_status(PyObject *obj, MPI_Status **out) {
    *out = NULL;
    if (obj == NULL || obj == Py_None) return 1;
    if (!PyObject_TypeCheck(obj, &PyMPIStatus_Type)) return 0;
    *out = PyMPIStatus_Get(obj);
    return *out != NULL;
}

static PyObject *finish_receive(Method *m, PyObject *self, MPI_Status *status, MPI_Status *theirs, double start,
                                PyObject *code, int where, PyObject *result) {
    if (theirs != NULL) *theirs = *status;
    if (record_call(m, self, RECV, status->MPI_SOURCE, status->MPI_TAG, 0, received_bytes(status), start, code,
                    where) < 0) {
        Py_XDECREF(result);
        return NULL;
    }
    if (result == NULL) Py_RETURN_NONE;
    return result;
}

static PyObject *do_recv(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *self = args[0];
    int source, tag;
    MPI_Status *theirs;
    PyObject *buf = argument(args + 1, nargs - 1, kwnames, 0, "buf");
    if (nargs > 5 || buf == NULL || !keywords_known(kwnames, RECV_KEYWORDS)
        || !small_int(argument(args + 1, nargs - 1, kwnames, 1, "source"), MPI_ANY_SOURCE, &source)
        || !small_int(argument(args + 1, nargs - 1, kwnames, 2, "tag"), MPI_ANY_TAG, &tag)
        || !user_status(argument(args + 1, nargs - 1, kwnames, 3, "status"), &theirs)
        || source == MPI_PROC_NULL || is_revoked(self))
        return call_fallback(m, args, nargsf, kwnames);
    Py_buffer view;
    MPI_Datatype type;
    int count, where;
    MPI_Comm *comm;
    PyObject *code;
    int go = begin_buffer_call(self, buf, 1, &view, &type, &count, &comm, &code, &where);
    if (go <= 0) return go < 0 ? NULL : call_fallback(m, args, nargsf, kwnames);
    double start = now();
    long long size = view.len;
    MPI_Request request;
    MPI_Status status;
    int ierr = MPI_Irecv(view.buf, count, type, source, tag, *comm, &request);
    int done = ierr == MPI_SUCCESS ? settle(&request, &status, &ierr) : -1;
    if (done < 0) {
        PyBuffer_Release(&view);
        Py_XDECREF(code);
        return raise_mpi(ierr), NULL;
    }
    if (done) {
        PyBuffer_Release(&view);
    } else {
        PyObject *held = hold(&view, NULL);
        if (held == NULL || finish_in_python(m, self, request, &status, held, "recv", source, tag, size,
                                             code, where, 1) < 0) {
            Py_XDECREF(code);
            return NULL;
        }
    }
    return finish_receive(m, self, &status, theirs, start, code, where, NULL);
}

static PyObject *do_send_object(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *self = args[0];
    int dest, tag;
    PyObject *obj = argument(args + 1, nargs - 1, kwnames, 0, "obj");
    PyObject *dest_obj = argument(args + 1, nargs - 1, kwnames, 1, "dest");
    if (nargs > 4 || obj == NULL || dest_obj == NULL || !keywords_known(kwnames, SENDOBJ_KEYWORDS)
        || !small_int(dest_obj, MPI_PROC_NULL, &dest)
        || !small_int(argument(args + 1, nargs - 1, kwnames, 2, "tag"), 0, &tag)
        || dest == MPI_PROC_NULL || is_revoked(self))
        return call_fallback(m, args, nargsf, kwnames);
    MPI_Comm *comm = PyMPIComm_Get(self);
    if (comm == NULL) return NULL;
    int where;
    PyObject *code = caller(&where);
    double start = now();
    PyObject *data = PyObject_CallOneArg(pickle_dumps, obj);
    if (data == NULL) {
        Py_XDECREF(code);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(data);
        Py_XDECREF(code);
        return NULL;
    }
    long long size = view.len;
    MPI_Request request;
    MPI_Status status;
    int count, made;
    MPI_Datatype type;
    int ierr = bytes_as(view.len, &count, &type, &made);
    if (ierr == MPI_SUCCESS) ierr = MPI_Isend(view.buf, count, type, dest, tag, *comm, &request);
    if (made) MPI_Type_free(&type);
    int done = ierr == MPI_SUCCESS ? settle(&request, &status, &ierr) : -1;
    if (done < 0) {
        PyBuffer_Release(&view);
        Py_DECREF(data);
        Py_XDECREF(code);
        return raise_mpi(ierr), NULL;
    }
    PyObject *sent = end_send(m, self, request, done, &view, data, dest, tag, size, start, code, where);
    Py_DECREF(data);
    return sent;
}

static PyObject *do_recv_object(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *self = args[0];
    int source, tag;
    MPI_Status *theirs;
    PyObject *buf = argument(args + 1, nargs - 1, kwnames, 0, "buf");
    if (nargs > 5 || (buf != NULL && buf != Py_None) || !keywords_known(kwnames, RECV_KEYWORDS)
        || !small_int(argument(args + 1, nargs - 1, kwnames, 1, "source"), MPI_ANY_SOURCE, &source)
        || !small_int(argument(args + 1, nargs - 1, kwnames, 2, "tag"), MPI_ANY_TAG, &tag)
        || !user_status(argument(args + 1, nargs - 1, kwnames, 3, "status"), &theirs)
        || source == MPI_PROC_NULL || is_revoked(self))
        return call_fallback(m, args, nargsf, kwnames);
    MPI_Comm *comm = PyMPIComm_Get(self);
    if (comm == NULL) return NULL;
    MPI_Message message;
    MPI_Status status;
    int ierr;
    int where;
    PyObject *code = caller(&where);
    double start = now();
    int found = probe(source, tag, *comm, &message, &status, &ierr);
    if (found < 0) {
        Py_XDECREF(code);
        return raise_mpi(ierr), NULL;
    }
    if (!found) {  /* not here within the spin: Python's polled receive from here */
        PyObject *status_obj = PyMPIStatus_New(&status);
        PyObject *file = file_of(code);
        PyObject *result = NULL;
        if (status_obj != NULL && file != NULL)
            result = PyObject_CallFunction(receive_object, "OOiiOOi", self, m->name, source, tag, status_obj, file,
                                           line_of(code, where));
        Py_XDECREF(file);
        if (result == NULL) {
            Py_XDECREF(status_obj);
            Py_XDECREF(code);
            return NULL;
        }
        status = *PyMPIStatus_Get(status_obj);
        Py_DECREF(status_obj);
        return finish_receive(m, self, &status, theirs, start, code, where, result);
    }
    long long size = received_bytes(&status);
    PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (data == NULL) {
        Py_XDECREF(code);
        return NULL;
    }
    int count, made;
    MPI_Datatype type;
    ierr = bytes_as(size, &count, &type, &made);
    if (ierr != MPI_SUCCESS) {
    } else if (size <= whole_on_arrival) {  /* arrived whole: its receive returns at once */
        ierr = MPI_Mrecv(PyBytes_AS_STRING(data), count, type, &message, &status);
    } else {  /* a large pickle may need its sender's progress: polled */
        MPI_Request request;
        MPI_Status arrived;
        ierr = MPI_Imrecv(PyBytes_AS_STRING(data), count, type, &message, &request);
        int done = ierr == MPI_SUCCESS ? settle(&request, &arrived, &ierr) : -1;
        if (done == 0) {
            Py_buffer view;
            PyObject *held = PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0 ? NULL : hold(&view, NULL);
            if (held == NULL || finish_in_python(m, self, request, &arrived, held, "recv", source, tag, 0, code,
                                                 where, 0) < 0) {
                if (made) MPI_Type_free(&type);
                Py_DECREF(data);
                Py_XDECREF(code);
                return NULL;
            }
        }
    }
    if (made) MPI_Type_free(&type);
    if (ierr != MPI_SUCCESS) {
        Py_DECREF(data);
        Py_XDECREF(code);
        return raise_mpi(ierr), NULL;
    }
    PyObject *result = size ? PyObject_CallOneArg(pickle_loads, data) : (Py_INCREF(Py_None), Py_None);
    Py_DECREF(data);
    if (result == NULL) {
        Py_XDECREF(code);
        return NULL;
    }
    return finish_receive(m, self, &status, theirs, start, code, where, result);
}

/* Bytes of a buffer spec as mpinb.rank.mpi._calls.nbytes counts them: an array's, or a spec's first item's. */
static long long nbytes(PyObject *spec) {
    if (spec == NULL || spec == Py_None) return 0;
    if ((PyList_Check(spec) || PyTuple_Check(spec)))
        return PySequence_Fast_GET_SIZE(spec) ? nbytes(PySequence_Fast_ITEMS(spec)[0]) : 0;
    if (!PyObject_CheckBuffer(spec)) return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(spec, &view, PyBUF_FULL_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    long long size = view.len;
    PyBuffer_Release(&view);
    return size;
}

/* The members' agreement that each is in this call, with this root: _collectives.agree's, in C.
 * The same messages, tags and rounds, so a member that takes the Python path agrees with one on
 * this one. A round still pending after the spin is waited for by Python (interruptible, and
 * described to the notebook); a difference found is said by Python. 0, or -1 with an error. */
static int agree(Method *m, PyObject *self, int root, PyObject *code, int where) {
    PyObject *channel = PyObject_CallOneArg(agreement, self);
    if (channel == NULL || channel == Py_None) {
        Py_XDECREF(channel);
        return channel == NULL ? -1 : 0;
    }
    MPI_Comm *shadow = PyMPIComm_Get(PyTuple_GET_ITEM(channel, 0));
    int tag = (int)PyLong_AsLong(PyTuple_GET_ITEM(channel, 1));
    /* the two messages live in a Python object: an abandoned round keeps them (see _waiting.abandon) */
    PyObject *held = PyByteArray_FromStringAndSize(NULL, 6 * sizeof(int));
    if (shadow == NULL || PyErr_Occurred() || held == NULL) {
        Py_XDECREF(held);
        Py_DECREF(channel);
        return -1;
    }
    int *mine = (int *)PyByteArray_AS_STRING(held), *heard = mine + 3;
    mine[0] = m->agreed_code;
    mine[1] = root;
    mine[2] = 0;
    int rank = 0, size = 1, result = 0, ierr = MPI_SUCCESS;
    MPI_Comm_rank(*shadow, &rank);
    MPI_Comm_size(*shadow, &size);
    for (int distance = 1; distance < size && result == 0; distance *= 2) {
        MPI_Request pair[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        ierr = MPI_Irecv(heard, 3, MPI_INT, ((rank - distance) % size + size) % size, tag, *shadow, &pair[0]);
        if (ierr == MPI_SUCCESS) ierr = MPI_Isend(mine, 3, MPI_INT, (rank + distance) % size, tag, *shadow, &pair[1]);
        int done = ierr == MPI_SUCCESS ? settle_pair(pair, &ierr) : -1;
        if (done < 0) {
            raise_mpi(ierr);
            result = -1;
            Py_INCREF(held);  /* kept for good: MPI may still use what a failed round posted */
        } else if (done == 0) {
            PyObject *file = file_of(code);
            PyObject *receive = PyMPIRequest_New(pair[0]), *send = PyMPIRequest_New(pair[1]);
            PyObject *finished = file == NULL || receive == NULL || send == NULL ? NULL
                : PyObject_CallFunction(finish_round, "OOOOOiOi", receive, send, held, self, m->name, root,
                                        file, line_of(code, where));
            result = finished == NULL ? -1 : 0;
            Py_XDECREF(finished);
            Py_XDECREF(receive);
            Py_XDECREF(send);
            Py_XDECREF(file);
        }
        if (result == 0 && (heard[2] || heard[0] != mine[0] || heard[1] != mine[1]))
            mine[2] = 1;  /* (the round's send is complete) */
    }
    if (result == 0 && mine[2]) {  /* every member knows: Python says who called what */
        PyObject *file = file_of(code);
        PyObject *error = file == NULL ? NULL
            : PyObject_CallFunction(disagreed, "OOiOii", self, m->name, root, file, line_of(code, where),
                                    m->agreed_code);
        if (error != NULL) PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_XDECREF(error);
        Py_XDECREF(file);
        result = -1;
    }
    Py_DECREF(held);
    Py_DECREF(channel);
    return result;
}

static PyObject *collective_done(Method *m, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames, int root, double start, PyObject *code, int where);

/* The key of argument ``arg``; 0 if it is of a kind that is not keyed. (A reduction takes no bare
 * datatype: one comes only in a [buffer, count, datatype] list, which is not keyed.) */
static int argument_key(PyObject *arg, ArgumentKey *key) {
    key->type = Py_TYPE(arg);
    if (arg == Py_None) return 1;
    if (PyLong_Check(arg)) {
        int overflow = 0;
        key->value = PyLong_AsLongLongAndOverflow(arg, &overflow);
        if (overflow || (key->value == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        return 1;
    }
    if (PyObject_TypeCheck(arg, &PyMPIOp_Type)) {
        MPI_Op *op = PyMPIOp_Get(arg);
        if (op == NULL) {
            PyErr_Clear();
            return 0;
        }
        _Static_assert(sizeof(MPI_Op) <= sizeof(long long), "an operation's handle fits an argument key's value");
        memcpy(&key->value, op, sizeof(MPI_Op));
        return 1;
    }
    if (!PyObject_CheckBuffer(arg)) return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_FULL_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *format = view.format ? view.format : "B";
    int keyed = view.ndim <= KEYED_DIMENSIONS && view.suboffsets == NULL && strlen(format) < KEYED_FORMAT;
    if (keyed) {
        key->buf = view.buf;
        key->len = view.len;
        key->itemsize = view.itemsize;
        key->readonly = view.readonly;
        key->ndim = view.ndim;
        for (int d = 0; d < view.ndim; d++) {
            key->shape[d] = view.shape[d];
            key->strides[d] = view.strides[d];
        }
        strcpy(key->format, format);
    }
    PyBuffer_Release(&view);
    return keyed;
}

/* The key of a call on ``args[0]``; 0 if it has an argument that is not keyed. */
static int call_key(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, CallKey *key) {
    memset(key, 0, sizeof *key);
    key->count = nargs - 1 + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    if (key->count > KEYED_ARGUMENTS) return 0;
    MPI_Comm *comm = PyMPIComm_Get(args[0]);
    if (comm == NULL) {
        PyErr_Clear();
        return 0;
    }
    key->comm = *comm;
    if (MPI_Comm_size(*comm, &key->size) != MPI_SUCCESS || MPI_Comm_rank(*comm, &key->rank) != MPI_SUCCESS
        || MPI_Comm_test_inter(*comm, &key->inter) != MPI_SUCCESS)
        return 0;
    key->kwnames = kwnames;
    for (Py_ssize_t i = 0; i < key->count; i++)
        if (!argument_key(args[1 + i], &key->arguments[i])) return 0;
    return 1;
}

static int same_argument(const ArgumentKey *a, const ArgumentKey *b) {
    if (a->type != b->type || a->buf != b->buf || a->len != b->len || a->itemsize != b->itemsize
        || a->readonly != b->readonly || a->ndim != b->ndim || a->value != b->value || strcmp(a->format, b->format))
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d]) return 0;
    return 1;
}

static int same_call(const CallKey *a, const CallKey *b) {
    if (!a->kept || a->comm != b->comm || a->size != b->size || a->rank != b->rank || a->inter != b->inter
        || a->kwnames != b->kwnames || a->count != b->count)
        return 0;
    for (Py_ssize_t i = 0; i < a->count; i++)
        if (!same_argument(&a->arguments[i], &b->arguments[i])) return 0;
    return 1;
}

static void forget_call(CallKey *key) {
    if (!key->kept) return;
    key->kept = 0;  /* first: freeing a type below may run Python code, and another thread with it */
    for (Py_ssize_t i = 0; i < key->count; i++) Py_XDECREF(key->arguments[i].type);
    Py_XDECREF(key->kwnames);
}

static void keep_passed(Method *m, const CallKey *key) {
    CallKey *slot = &m->passed[m->next_passed];
    m->next_passed = (m->next_passed + 1) % CALLS_KEPT;
    forget_call(slot);
    *slot = *key;
    for (Py_ssize_t i = 0; i < slot->count; i++) Py_INCREF(slot->arguments[i].type);
    Py_XINCREF(slot->kwnames);
    slot->kept = 1;
}

/* _collectives.rehearse(self, blocking, *args, **kwargs), unless arguments of the same key
 * passed it already (see CallKey): 0, or -1 with the error the call gives. */
static int rehearsed(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    CallKey key;
    int keyed = call_key(args, nargs, kwnames, &key);
    for (int k = 0; keyed && k < CALLS_KEPT; k++)
        if (same_call(&m->passed[k], &key)) return 0;
    PyObject *stack[18];
    if (total > 16) {
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return -1;
    }
    stack[0] = args[0];
    stack[1] = m->blocking;
    memcpy(stack + 2, args + 1, (size_t)(total - 1) * sizeof(PyObject *));
    PyObject *done = PyObject_Vectorcall(rehearse, stack, (size_t)(nargs + 1), kwnames);
    if (done != NULL && keyed) keep_passed(m, &key);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* ---- entering a reduction ahead of its members ----------------------------------------------
 * Where every rank of the pool shares one host, a traced Allreduce does not wait for the members
 * to agree that each is there (a barrier's cost, most of it the wait to be scheduled: with more
 * ranks than cores it was 0.13 of the call's time at 16 kB). Each rank instead says on a board in
 * shared memory (_entered_ahead.setup) which call it is in, and enters the blocking call at once,
 * unless another member is, or may be about to be, inside a call that this rank does not know to
 * be complete: then it waits, polled and interruptible, until every member has arrived. Written
 * before each rank reads the others' (a sequentially consistent store, then loads), so of two
 * ranks that enter different calls at the same moment at least one sees the other and waits, a
 * rank blocked inside MPI only ever waits for ranks that are not: those can always join its call.
 * When one never comes (a hang, a member that raised first), the pool's recovery asks each idle
 * rank to make the calls that others entered ahead of it, with placeholder values of the same
 * count, type and operation (_entered_ahead.release_blocked): the members inside return, see that
 * they were released, and raise as an interrupted wait does. A call's state is one 64-bit word
 * (state, communicator's slot, the call's number on it), so no rank reads half of another's. */
enum { LANES = 4, SLOT_WORDS = 8, MAX_COMMS = 1024, SIGNATURE_FORMAT = 16 };
enum { S_IDLE = 0, S_ANNOUNCED = 1, S_ENTERED = 2, S_RELEASED = 3 };

static int64_t *board = NULL;  /* slots (ranks x LANES x SLOT_WORDS), counts (ranks x MAX_COMMS), the next slot */
static Py_buffer board_view;
static int board_ranks = 0, board_me = -1;
static int *members_of[MAX_COMMS];    /* this rank's communicators: their members' ranks on the board */
static int n_members[MAX_COMMS];
static int64_t done_calls[MAX_COMMS]; /* calls on each that this rank completed (or was released from) */
static int lane_busy[LANES];          /* (changed with the GIL held) */
static PyObject *predefined_ops = NULL, *in_place = NULL, *released_fn = NULL, *unpublish_fn = NULL,
                *wait_arrivals_fn = NULL, *str_slot = NULL;
static long long entered_ahead = 0, waited_for_members = 0;

/* What a lane's thread is inside, for the thread that publishes long waits (_entered_ahead). */
typedef struct {
    int64_t seq;            /* atomic: the entry's number, 0 when not inside */
    int64_t since_ns;       /* atomic: monotonic */
    PyObject *comm, *name, *code;  /* borrowed while inside (read with the GIL held) */
    int where;
    int64_t published;      /* the entry whose wait was published */
} Inside;
static Inside inside[LANES];
static int64_t inside_entries = 0;

/* How long the lane has been inside its call, in seconds (for the wait's description). */
static double seconds_inside(const Inside *in) {
    return now() - 1e-9 * (double)__atomic_load_n(&in->since_ns, __ATOMIC_SEQ_CST);
}

static inline int64_t *slot_of_lane(int rank, int lane) {
    return board + ((size_t)rank * LANES + (size_t)lane) * SLOT_WORDS;
}
static inline int64_t *count_of(int rank, int idx) {
    return board + (size_t)board_ranks * LANES * SLOT_WORDS + (size_t)rank * MAX_COMMS + (size_t)idx;
}
static inline int64_t packed(int64_t state, int64_t idx, int64_t k) { return state | (idx << 2) | (k << 16); }
static inline int state_of(int64_t word) { return (int)(word & 3); }
static inline int comm_of(int64_t word) { return (int)((word >> 2) & 0x3fff); }
static inline int64_t call_of(int64_t word) { return word >> 16; }

/* Whether some member (any lane but ``mine``) is announced or inside another call than (idx, k)
 * that this rank does not know to be complete (an Allreduce it completed had every member in it). */
static int others_may_block(int idx, int64_t k, int mine) {
    for (int i = 0; i < n_members[idx]; i++) {
        int r = members_of[idx][i];
        for (int lane = 0; lane < LANES; lane++) {
            if (r == board_me && lane == mine) continue;
            int64_t word = __atomic_load_n(slot_of_lane(r, lane), __ATOMIC_SEQ_CST);
            if (state_of(word) == S_IDLE) continue;
            int other = comm_of(word);
            int64_t call = call_of(word);
            if (other == idx && call == k) continue;
            if (other < MAX_COMMS && members_of[other] != NULL && done_calls[other] >= call) continue;
            return 1;
        }
    }
    return 0;
}

static int all_arrived(int idx, int64_t k) {
    for (int i = 0; i < n_members[idx]; i++)
        if (__atomic_load_n(count_of(members_of[idx][i], idx), __ATOMIC_SEQ_CST) < k) return 0;
    return 1;
}

typedef struct { int idx; int64_t k; } Arrival;
static int test_arrival(void *what, int *flag) {
    Arrival *a = what;
    *flag = all_arrived(a->idx, a->k);
    return MPI_SUCCESS;
}

/* The communicator's slot on the board (_entered_ahead.enroll), or -1. */
static int board_slot(PyObject *self) {
    if (board == NULL) return -1;
    PyObject *value = PyObject_GetAttr(self, str_slot);
    if (value == NULL) {
        PyErr_Clear();
        return -1;
    }
    long idx = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
    Py_DECREF(value);
    if (idx == -1 && PyErr_Occurred()) PyErr_Clear();
    return idx >= 0 && idx < MAX_COMMS && members_of[idx] != NULL ? (int)idx : -1;
}

/* What a member that never came needs to join this call in its place: the element count, the
 * buffer's format and the operation (an index in _entered_ahead's predefined ones); count -1 when
 * the call's form is not one that can be matched so (a [buffer, count, type] list, a user's op). */
static void write_signature(int64_t *slot, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    slot[1] = -1;
    memset(&slot[2], 0, SIGNATURE_FORMAT);
    PyObject *send = argument(args, nargs, kwnames, 0, "sendbuf");
    PyObject *receive = argument(args, nargs, kwnames, 1, "recvbuf");
    PyObject *op = argument(args, nargs, kwnames, 2, "op");
    PyObject *buffer = send == in_place ? receive : send;
    int which = 0;  /* SUM, mpi4py's default */
    if (op != NULL) {
        which = -1;
        MPI_Op *handle = PyObject_TypeCheck(op, &PyMPIOp_Type) ? PyMPIOp_Get(op) : NULL;
        for (Py_ssize_t i = 0; handle != NULL && i < PyTuple_GET_SIZE(predefined_ops); i++) {
            MPI_Op *known = PyMPIOp_Get(PyTuple_GET_ITEM(predefined_ops, i));
            if (known != NULL && *known == *handle) which = (int)i;
        }
        if (PyErr_Occurred()) PyErr_Clear();
    }
    Py_buffer view;
    MPI_Datatype type;
    int count;
    if (which < 0 || buffer == NULL || !simple_buffer(buffer, 0, &view, &type, &count)) return;
    if (view.format != NULL && strlen(view.format) < SIGNATURE_FORMAT) {
        strcpy((char *)&slot[2], view.format);
        slot[1] = count;
        slot[4] = which;
    } else if (view.format == NULL) {
        strcpy((char *)&slot[2], "B");
        slot[1] = count;
        slot[4] = which;
    }
    PyBuffer_Release(&view);
}

static int take_lane(void) {
    for (int lane = 0; lane < LANES; lane++)
        if (!lane_busy[lane]) {
            lane_busy[lane] = 1;
            return lane;
        }
    return -1;
}

/* Python's polled wait (interruptible, described to the notebook) for every member to have
 * arrived at call k on ``idx`` (or, with idx -1, for a free lane): 0, or -1 with its error. */
static int wait_in_python(PyObject *self, Method *m, PyObject *code, int where, int idx, int64_t k) {
    PyObject *file = file_of(code);
    PyObject *done = file == NULL ? NULL
        : PyObject_CallFunction(wait_arrivals_fn, "OOOiiL", self, m->name, file, line_of(code, where), idx,
                                (long long)k);
    Py_XDECREF(file);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* The traced Allreduce on a communicator with a slot on the board (see above). */
static PyObject *speculate(Method *m, PyObject *self, int idx, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames, double start, PyObject *code, int where) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int lane;
    while ((lane = take_lane()) < 0)
        if (wait_in_python(self, m, code, where, -1, 0) < 0) {
            Py_XDECREF(code);
            return NULL;
        }
    int64_t *slot = slot_of_lane(board_me, lane);
    int64_t k = __atomic_add_fetch(count_of(board_me, idx), 1, __ATOMIC_SEQ_CST);
    write_signature(slot, args + 1, nargs - 1, kwnames);
    __atomic_store_n(slot, packed(S_ANNOUNCED, idx, k), __ATOMIC_SEQ_CST);
    if (others_may_block(idx, k, lane)) {
        __atomic_store_n(slot, packed(S_IDLE, idx, k), __ATOMIC_SEQ_CST);  /* free while it waits */
        waited_for_members++;
        Arrival arrival = {idx, k};
        int ierr, arrived = spin(test_arrival, &arrival, &ierr);
        if (arrived == 0 && wait_in_python(self, m, code, where, idx, k) < 0) {
            lane_busy[lane] = 0;  /* done_calls stays: release_blocked makes this call if others entered it */
            Py_XDECREF(code);
            return NULL;
        }
    } else {
        entered_ahead++;
    }
    __atomic_store_n(slot, packed(S_ENTERED, idx, k), __ATOMIC_SEQ_CST);
    Inside *in = &inside[lane];
    in->comm = self;
    in->name = m->name;
    in->code = code;
    in->where = where;
    __atomic_store_n(&in->since_ns, (int64_t)(now() * 1e9), __ATOMIC_SEQ_CST);
    __atomic_store_n(&in->seq, ++inside_entries, __ATOMIC_SEQ_CST);
    int64_t entry = in->seq;
    PyObject *returned = PyObject_Vectorcall(m->blocking, args, nargsf, kwnames);
    __atomic_store_n(&in->seq, 0, __ATOMIC_SEQ_CST);
    in->comm = in->name = in->code = NULL;
    int64_t expected = packed(S_ENTERED, idx, k);
    int released = !__atomic_compare_exchange_n(slot, &expected, packed(S_IDLE, idx, k), 0, __ATOMIC_SEQ_CST,
                                                __ATOMIC_SEQ_CST);
    if (released) __atomic_store_n(slot, packed(S_IDLE, idx, k), __ATOMIC_SEQ_CST);
    if (returned != NULL || released) done_calls[idx] = k;  /* (an error of MPI's own: others may wait in it) */
    lane_busy[lane] = 0;
    if (in->published == entry && !released) {  /* its wait was published: say that it is over */
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        PyObject *said = PyObject_CallNoArgs(unpublish_fn);
        if (said == NULL) PyErr_Clear();
        Py_XDECREF(said);
        PyErr_Restore(exc_type, exc_value, exc_tb);
    }
    if (released) {
        Py_XDECREF(returned);
        PyErr_Clear();
        PyObject *file = file_of(code);
        PyObject *error = file == NULL ? NULL
            : PyObject_CallFunction(released_fn, "OOOid", self, m->name, file, line_of(code, where),
                                    seconds_inside(in));
        if (error != NULL) PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_XDECREF(error);
        Py_XDECREF(file);
        Py_XDECREF(code);
        return NULL;
    }
    if (returned == NULL) {
        Py_XDECREF(code);
        return NULL;
    }
    Py_DECREF(returned);
    return collective_done(m, self, args, nargs, kwnames, -1, start, code, where);
}

/* speculation(board, ranks, me, ops, in_place, released, unpublish, wait_arrivals): the board
 * (a writable buffer shared by every rank of the pool, zeroed), this rank's place on it, and
 * what the slow paths call (see _entered_ahead.setup). */
static PyObject *speculation(PyObject *module, PyObject *args) {
    PyObject *buffer, *ops, *place, *released, *unpublish, *arrivals;
    int ranks, me;
    if (!PyArg_ParseTuple(args, "OiiO!OOOO", &buffer, &ranks, &me, &PyTuple_Type, &ops, &place, &released,
                          &unpublish, &arrivals))
        return NULL;
    if (board != NULL) return PyErr_Format(PyExc_RuntimeError, "the board is set up once");
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    size_t needed = ((size_t)ranks * (LANES * SLOT_WORDS + MAX_COMMS) + 1) * sizeof(int64_t);
    if (ranks < 1 || me < 0 || me >= ranks || (size_t)view.len < needed || ((uintptr_t)view.buf % 8) != 0) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "a board of %zd bytes for %d ranks (%zu needed)", view.len, ranks,
                            needed);
    }
    board_view = view;  /* kept for good: the buffer's owner stays alive */
    board = view.buf;
    board_ranks = ranks;
    board_me = me;
    Py_INCREF(ops);
    predefined_ops = ops;
    Py_INCREF(place);
    in_place = place;
    Py_INCREF(released);
    released_fn = released;
    Py_INCREF(unpublish);
    unpublish_fn = unpublish;
    Py_INCREF(arrivals);
    wait_arrivals_fn = arrivals;
    Py_RETURN_NONE;
}

/* speculation_comm(idx, members): a communicator of this rank got slot idx; members are its
 * members' ranks on the board. */
static PyObject *speculation_comm(PyObject *module, PyObject *args) {
    int idx;
    PyObject *members;
    if (!PyArg_ParseTuple(args, "iO!", &idx, &PyTuple_Type, &members)) return NULL;
    if (board == NULL || idx < 0 || idx >= MAX_COMMS) return PyErr_Format(PyExc_ValueError, "no slot %d", idx);
    Py_ssize_t n = PyTuple_GET_SIZE(members);
    int *list = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    if (list == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        long r = PyLong_AsLong(PyTuple_GET_ITEM(members, i));
        if (r < 0 || r >= board_ranks) {
            PyMem_Free(list);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "rank %ld is not on the board", r);
            return NULL;
        }
        list[i] = (int)r;
    }
    PyMem_Free(members_of[idx]);
    members_of[idx] = list;
    n_members[idx] = (int)n;
    done_calls[idx] = __atomic_load_n(count_of(board_me, idx), __ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

/* speculation_reset(): after an aborted run (every rank, in a fresh world): counts start again. */
static PyObject *speculation_reset(PyObject *module, PyObject *unused) {
    if (board == NULL) Py_RETURN_NONE;
    for (int idx = 0; idx < MAX_COMMS; idx++) {
        __atomic_store_n(count_of(board_me, idx), 0, __ATOMIC_SEQ_CST);
        done_calls[idx] = 0;
    }
    for (int lane = 0; lane < LANES; lane++)
        if (!lane_busy[lane]) __atomic_store_n(slot_of_lane(board_me, lane), 0, __ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

static PyObject *speculation_arrived(PyObject *module, PyObject *args) {
    int idx;
    long long k;
    if (!PyArg_ParseTuple(args, "iL", &idx, &k)) return NULL;
    if (idx < 0) {
        for (int lane = 0; lane < LANES; lane++)
            if (!lane_busy[lane]) Py_RETURN_TRUE;
        Py_RETURN_FALSE;
    }
    if (board == NULL || idx >= MAX_COMMS || members_of[idx] == NULL) Py_RETURN_TRUE;
    return PyBool_FromLong(all_arrived(idx, k));
}

/* Whether a thread of this rank is in call k on idx (so this rank is not missing from it). */
static int inside_call(int idx, int64_t k) {
    for (int lane = 0; lane < LANES; lane++) {
        int64_t word = __atomic_load_n(slot_of_lane(board_me, lane), __ATOMIC_SEQ_CST);
        if (state_of(word) != S_IDLE && comm_of(word) == idx && call_of(word) == k) return 1;
    }
    return 0;
}

/* speculation_duties() -> [(idx, k, count, format, op)]: the calls that members entered ahead
 * of this rank (which did not make them, and made every call before them on that communicator). */
static PyObject *speculation_duties(PyObject *module, PyObject *unused) {
    PyObject *duties = PyList_New(0);
    if (duties == NULL || board == NULL) return duties;
    for (int r = 0; r < board_ranks; r++) {
        for (int lane = 0; lane < LANES; lane++) {
            int64_t *slot = slot_of_lane(r, lane);
            int64_t word = __atomic_load_n(slot, __ATOMIC_SEQ_CST);
            int state = state_of(word), idx = comm_of(word);
            int64_t k = call_of(word);
            if ((state != S_ENTERED && state != S_RELEASED) || idx >= MAX_COMMS || members_of[idx] == NULL ||
                done_calls[idx] != k - 1 || r == board_me || inside_call(idx, k))
                continue;
            char format[SIGNATURE_FORMAT + 1] = {0};
            memcpy(format, &slot[2], SIGNATURE_FORMAT);
            PyObject *duty = Py_BuildValue("(iLLsL)", idx, (long long)k, (long long)slot[1], format, (long long)slot[4]);
            int found = duty == NULL ? -1 : PySequence_Contains(duties, duty);
            if (found == 0 && PyList_Append(duties, duty) < 0) found = -1;
            Py_XDECREF(duty);
            if (found < 0) {
                Py_DECREF(duties);
                return NULL;
            }
        }
    }
    return duties;
}

/* speculation_try_proxy(idx, k) -> lane or -1: whether this rank may now make call k on idx in
 * the place of its own (the same rule as entering); if so it is inside it on that lane, and the
 * members that entered it ahead are marked released. speculation_left(idx, k, lane) when made. */
static PyObject *speculation_try_proxy(PyObject *module, PyObject *args) {
    int idx;
    long long k;
    if (!PyArg_ParseTuple(args, "iL", &idx, &k)) return NULL;
    if (board == NULL || idx < 0 || idx >= MAX_COMMS || members_of[idx] == NULL) return PyLong_FromLong(-1);
    int lane = take_lane();
    if (lane < 0) return PyLong_FromLong(-1);
    int64_t *slot = slot_of_lane(board_me, lane);
    int64_t *count = count_of(board_me, idx);
    if (__atomic_load_n(count, __ATOMIC_SEQ_CST) < k) __atomic_store_n(count, k, __ATOMIC_SEQ_CST);
    __atomic_store_n(slot, packed(S_ANNOUNCED, idx, k), __ATOMIC_SEQ_CST);
    if (others_may_block(idx, k, lane)) {
        __atomic_store_n(slot, packed(S_IDLE, idx, k), __ATOMIC_SEQ_CST);
        lane_busy[lane] = 0;
        return PyLong_FromLong(-1);
    }
    __atomic_store_n(slot, packed(S_ENTERED, idx, k), __ATOMIC_SEQ_CST);
    for (int i = 0; i < n_members[idx]; i++) {
        if (members_of[idx][i] == board_me) continue;
        for (int other = 0; other < LANES; other++) {
            int64_t expected = packed(S_ENTERED, idx, k);
            __atomic_compare_exchange_n(slot_of_lane(members_of[idx][i], other), &expected,
                                        packed(S_RELEASED, idx, k), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        }
    }
    return PyLong_FromLong(lane);
}

static PyObject *speculation_left(PyObject *module, PyObject *args) {
    int idx, lane;
    long long k;
    if (!PyArg_ParseTuple(args, "iLi", &idx, &k, &lane)) return NULL;
    if (board != NULL && idx >= 0 && idx < MAX_COMMS && lane >= 0 && lane < LANES) {
        __atomic_store_n(slot_of_lane(board_me, lane), packed(S_IDLE, idx, k), __ATOMIC_SEQ_CST);
        if (done_calls[idx] < k) done_calls[idx] = k;
        lane_busy[lane] = 0;
    }
    Py_RETURN_NONE;
}

/* speculation_wait_inside(after) -> (comm, name, file, line, seconds inside): blocks (without the GIL)
 * until a lane of this rank has been inside a call entered ahead for ``after`` seconds, and
 * that wait was not yet given; for the thread that publishes it (_entered_ahead). */
static PyObject *speculation_wait_inside(PyObject *module, PyObject *arg) {
    double after = PyFloat_AsDouble(arg);
    if (after == -1.0 && PyErr_Occurred()) return NULL;
    while (1) {
        Py_BEGIN_ALLOW_THREADS
        int found = 0;
        while (!found) {
            struct timespec pause = {0, 50 * 1000 * 1000};
            nanosleep(&pause, NULL);
            int64_t at = (int64_t)(now() * 1e9);
            for (int lane = 0; lane < LANES && !found; lane++) {
                int64_t seq = __atomic_load_n(&inside[lane].seq, __ATOMIC_SEQ_CST);
                int64_t since = __atomic_load_n(&inside[lane].since_ns, __ATOMIC_SEQ_CST);
                found = seq != 0 && seq != inside[lane].published && at - since >= (int64_t)(after * 1e9);
            }
        }
        Py_END_ALLOW_THREADS
        for (int lane = 0; lane < LANES; lane++) {  /* with the GIL: the entering thread is not mid-step */
            Inside *in = &inside[lane];
            if (in->seq != 0 && in->seq != in->published && in->comm != NULL &&
                (int64_t)(now() * 1e9) - in->since_ns >= (int64_t)(after * 1e9)) {
                in->published = in->seq;
                PyObject *file = file_of(in->code);
                if (file == NULL) return NULL;
                return Py_BuildValue("OONid", in->comm, in->name, file, line_of(in->code, in->where),
                                     seconds_inside(in));
            }
        }
        if (PyErr_CheckSignals() < 0) return NULL;
    }
}

/* speculation_new_slot(): a slot number never given before in this pool (one member asks for all). */
static PyObject *speculation_new_slot(PyObject *module, PyObject *unused) {
    if (board == NULL) return PyLong_FromLong(-1);
    int64_t *next = board + (size_t)board_ranks * LANES * SLOT_WORDS + (size_t)board_ranks * MAX_COMMS;
    return PyLong_FromLongLong((long long)__atomic_fetch_add(next, 1, __ATOMIC_SEQ_CST));
}

static PyObject *speculation_counts(PyObject *module, PyObject *unused) {
    return Py_BuildValue("{sOsLsL}", "on", board != NULL ? Py_True : Py_False, "ahead", entered_ahead, "waited",
                         waited_for_members);
}

static PyObject *do_collective(Method *m, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *self = args[0];
    int root = -1;
    if (m->root_at >= 0 && !small_int(argument(args + 1, nargs - 1, kwnames, m->root_at, "root"), 0, &root))
        return call_fallback(m, args, nargsf, kwnames);
    int where;
    PyObject *code = caller(&where);
    double start = now();
    if (m->blocking != Py_None) {  /* the call itself (mpi4py parses, and releases the GIL in it) */
        int idx = -1;
        if (is_revoked(self) == 0) {
            if (rehearsed(m, args, nargsf, kwnames) < 0) {
                Py_XDECREF(code);
                return NULL;
            }
            if (m->speculative && (idx = board_slot(self)) >= 0)
                return speculate(m, self, idx, args, nargsf, kwnames, start, code, where);
            if (agree(m, self, root, code, where) < 0) {
                Py_XDECREF(code);
                return NULL;
            }
        }
        PyObject *returned = PyObject_Vectorcall(m->blocking, args, nargsf, kwnames);
        if (returned == NULL) {
            Py_XDECREF(code);
            return NULL;
        }
        Py_DECREF(returned);
        return collective_done(m, self, args, nargs, kwnames, root, start, code, where);
    }
    PyObject *request_obj = PyObject_Vectorcall(m->polled, args, nargsf, kwnames);  /* mpi4py parses, posts */
    if (request_obj == NULL) {
        Py_XDECREF(code);
        return NULL;
    }
    MPI_Request *request = PyMPIRequest_Get(request_obj);
    MPI_Status status;
    int ierr = MPI_SUCCESS;
    int done = request == NULL ? -2 : settle(request, &status, &ierr);
    if (done == 0) {  /* Python's polled wait from here: interruptible, described to the notebook */
        PyObject *file = file_of(code);
        PyObject *finished = file == NULL ? NULL
            : PyObject_CallFunction(finish, "OOOOOsiiLOii", request_obj, Py_None, Py_None, self, m->name,
                                    "collective", root, -1, 0LL, file, line_of(code, where), 0);
        Py_XDECREF(file);
        done = finished == NULL ? -2 : 1;
        Py_XDECREF(finished);
    }
    Py_DECREF(request_obj);
    if (done < 0) {
        Py_XDECREF(code);
        if (done == -1) raise_mpi(ierr);
        return NULL;
    }
    return collective_done(m, self, args, nargs, kwnames, root, start, code, where);
}

/* A collective's end: recorded, if recording is on (takes ``code``'s reference). */
static PyObject *collective_done(Method *m, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames, int root, double start, PyObject *code, int where) {
    if (!recording) {
        Py_XDECREF(code);
        Py_RETURN_NONE;
    }
    long long sent, received;
    PyObject *first = argument(args + 1, nargs - 1, kwnames, 0, m->bcast ? "buf" : "sendbuf");
    if (m->bcast) {
        int rank = -1;
        MPI_Comm *comm = PyMPIComm_Get(self);
        if (comm != NULL) MPI_Comm_rank(*comm, &rank);
        else PyErr_Clear();
        long long size = nbytes(first);
        sent = rank == root ? size : 0;
        received = rank == root ? 0 : size;
    } else {
        sent = nbytes(first);
        received = nbytes(argument(args + 1, nargs - 1, kwnames, 1, "recvbuf"));
    }
    if (record_call(m, self, COLLECTIVE, root, -1, sent, received, start, code, where) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Method_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Method *m = (Method *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || !PyObject_TypeCheck(args[0], &PyMPIComm_Type))
        return PyObject_Vectorcall(m->fallback, args, nargsf, kwnames);
    switch (m->action) {
    case DO_SEND: return do_send(m, args, nargsf, kwnames);
    case DO_RECV: return do_recv(m, args, nargsf, kwnames);
    case DO_SEND_OBJECT: return do_send_object(m, args, nargsf, kwnames);
    case DO_RECV_OBJECT: return do_recv_object(m, args, nargsf, kwnames);
    default: return do_collective(m, args, nargsf, kwnames);
    }
}

static PyObject *Method_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static void Method_dealloc(Method *self) {
    for (int k = 0; k < CALLS_KEPT; k++) forget_call(&self->passed[k]);
    Py_XDECREF(self->name);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->polled);
    Py_XDECREF(self->blocking);
    Py_XDECREF(self->doc);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Method_get_name(Method *self, void *closure) {
    Py_INCREF(self->name);
    return self->name;
}

static PyObject *Method_get_qualname(Method *self, void *closure) {
    return PyUnicode_FromFormat("TracedIntracomm.%U", self->name);
}

static PyObject *Method_get_doc(Method *self, void *closure) {
    PyObject *doc = self->doc ? self->doc : Py_None;
    Py_INCREF(doc);
    return doc;
}

static PyObject *Method_get_fallback(Method *self, void *closure) {
    Py_INCREF(self->fallback);
    return self->fallback;
}

static PyGetSetDef Method_getset[] = {
    {"__name__", (getter)Method_get_name, NULL, NULL, NULL},
    {"__qualname__", (getter)Method_get_qualname, NULL, NULL, NULL},
    {"__doc__", (getter)Method_get_doc, NULL, NULL, NULL},
    {"fallback", (getter)Method_get_fallback, NULL, "the Python tracer's method, for every other form", NULL},
    {NULL},
};

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpinb.rank.mpi._tracer.Method",
    .tp_basicsize = sizeof(Method),
    .tp_dealloc = (destructor)Method_dealloc,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = Method_get,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_getset = Method_getset,
    .tp_doc = "A traced MPI call in C (mpinb/rank/mpi/_tracer.c), as a method.",
};

/* ---- the module's functions ---------------------------------------------------------------- */
static const char *const ACTIONS[] = {"send", "recv", "send_object", "recv_object", "collective", NULL};

static PyObject *make_method(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"name", "action", "fallback", "polled", "root_at", "bcast", "blocking",
                               "agreed_code", "speculative", NULL};
    PyObject *name, *fallback, *polled = Py_None, *blocking = Py_None;
    const char *action;
    int root_at = -1, bcast = 0, agreed_code = -1, speculative = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UsO|OipOip", keywords, &name, &action, &fallback, &polled,
                                     &root_at, &bcast, &blocking, &agreed_code, &speculative))
        return NULL;
    int which = -1;
    for (int i = 0; ACTIONS[i]; i++)
        if (strcmp(ACTIONS[i], action) == 0) which = i;
    if (which < 0) return PyErr_Format(PyExc_ValueError, "unknown action %s", action);
    if (which == DO_COLLECTIVE && polled == Py_None)
        return PyErr_Format(PyExc_ValueError, "a collective needs its nonblocking form (polled=)");
    Method *m = PyObject_New(Method, &MethodType);
    if (m == NULL) return NULL;
    m->vectorcall = Method_vectorcall;
    Py_INCREF(name);
    m->name = name;
    Py_INCREF(fallback);
    m->fallback = fallback;
    Py_INCREF(polled);
    m->polled = polled;
    Py_INCREF(blocking);
    m->blocking = blocking;
    m->agreed_code = agreed_code;
    m->speculative = speculative && blocking != Py_None;
    m->doc = PyObject_GetAttrString(fallback, "__doc__");
    if (m->doc == NULL) PyErr_Clear();
    m->action = which;
    m->root_at = root_at;
    m->bcast = bcast;
    memset(m->passed, 0, sizeof m->passed);
    m->next_passed = 0;
    return (PyObject *)m;
}

static PyObject *configure(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"exception", "pickle", "typedict", "finish", "receive_object", "spin",
                               "polls_before_yield", "whole_on_arrival", "agreement", "finish_round",
                               "disagreed", "rehearse", "library_roots", "via", NULL};
    PyObject *exception, *pickle, *types, *finish_fn, *receive_fn, *agreement_fn, *round_fn, *disagreed_fn,
        *rehearse_fn, *roots, *via_dict;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OOdiiOOOOO!O!", keywords, &exception, &pickle, &PyDict_Type,
                                     &types, &finish_fn, &receive_fn, &spin_seconds,
                                     &polls_before_yield, &whole_on_arrival, &agreement_fn, &round_fn,
                                     &disagreed_fn, &rehearse_fn, &PyTuple_Type, &roots, &PyDict_Type, &via_dict))
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(roots); i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(roots, i))) {
            PyErr_SetString(PyExc_TypeError, "library_roots: a tuple of str");
            return NULL;
        }
    }
    for (int i = 0; i < CODE_CACHE; i++) Py_CLEAR(cached_code[i]);
    Py_INCREF(roots);
    Py_XSETREF(library_roots, roots);
    Py_INCREF(via_dict);
    Py_XSETREF(via, via_dict);
    if (polls_before_yield < 1) polls_before_yield = 1;
    PyObject *dumps = PyObject_GetAttrString(pickle, "dumps");
    PyObject *loads = dumps ? PyObject_GetAttrString(pickle, "loads") : NULL;
    if (loads == NULL) {
        Py_XDECREF(dumps);
        return NULL;
    }
    Py_XSETREF(pickle_dumps, dumps);
    Py_XSETREF(pickle_loads, loads);
    Py_INCREF(exception);
    Py_XSETREF(mpi_exception, exception);
    Py_INCREF(types);
    Py_XSETREF(typedict, types);
    Py_INCREF(finish_fn);
    Py_XSETREF(finish, finish_fn);
    Py_INCREF(receive_fn);
    Py_XSETREF(receive_object, receive_fn);
    Py_INCREF(agreement_fn);
    Py_XSETREF(agreement, agreement_fn);
    Py_INCREF(round_fn);
    Py_XSETREF(finish_round, round_fn);
    Py_INCREF(disagreed_fn);
    Py_XSETREF(disagreed, disagreed_fn);
    Py_INCREF(rehearse_fn);
    Py_XSETREF(rehearse, rehearse_fn);
    n_known = 0;
    Py_RETURN_NONE;
}

static PyObject *start(PyObject *module, PyObject *arg) {
    Py_ssize_t most = PyLong_AsSsize_t(arg);
    if (most == -1 && PyErr_Occurred()) return NULL;
    clear_events();
    capacity = most > 0 ? most : 0;
    dropped = 0;
    recording = 1;
    Py_RETURN_NONE;
}

static PyObject *add(PyObject *module, PyObject *event) {
    Event *e = new_event();
    if (e != NULL) {
        Py_INCREF(event);
        e->object = event;
    }
    Py_RETURN_NONE;
}

static PyObject *as_tuple(Event *e) {
    if (e->object != NULL) {
        Py_INCREF(e->object);
        return e->object;
    }
    PyObject *file = file_of(e->code);
    if (file == NULL) return NULL;
    return Py_BuildValue("OiOiiLLdddNi", e->op, e->kind, e->comm ? e->comm : Py_None, e->peer, e->tag, e->sent,
                         e->received, e->start, e->end, e->returned, file, line_of(e->code, e->where));
}

static PyObject *stop(PyObject *module, PyObject *unused) {
    recording = 0;
    PyObject *list = PyList_New(n_events);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n_events; i++) {
        PyObject *item = as_tuple(&events[i]);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    clear_events();
    return Py_BuildValue("Nn", list, dropped);
}

/* agree_on(group, name, agreed_code): the agreement of a collective that Python then makes (a
 * window's Fence, a file's Write_at_all...) over ``group`` (anything agreement_channel takes), in
 * C: the same messages as _collectives.agree, without the interpreter's cost per round. */
static PyObject *agree_on(PyObject *module, PyObject *args) {
    PyObject *group, *name;
    Method m = {0};
    if (!PyArg_ParseTuple(args, "OUi", &group, &name, &m.agreed_code)) return NULL;
    m.name = name;  /* (all that agree() reads of a method: borrowed for the call) */
    int where;
    PyObject *code = caller(&where);
    int result = agree(&m, group, -1, code, where);
    Py_XDECREF(code);
    if (result < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *count(PyObject *module, PyObject *unused) {
    return PyLong_FromSsize_t(n_events);
}

static PyMethodDef functions[] = {
    {"method", (PyCFunction)(void (*)(void))make_method, METH_VARARGS | METH_KEYWORDS,
     "method(name, action, fallback, polled=None, root_at=-1, bcast=False, blocking=None, agreed_code=-1): "
     "a traced call in C, as a method."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "What the C calls need from Python: mpi4py's exception, pickle and type map, the slow paths."},
    {"start", start, METH_O, "start(capacity): record from now on, at most capacity events."},
    {"add", add, METH_O, "add(event): an event made in Python, in call order with the C ones."},
    {"stop", stop, METH_NOARGS, "stop() -> (events as the schema's tuples, dropped): recording ends."},
    {"count", count, METH_NOARGS, "How many events are held now."},
    {"speculation", speculation, METH_VARARGS,
     "speculation(board, ranks, me, ops, in_place, released, unpublish, wait_arrivals): the shared board."},
    {"speculation_comm", speculation_comm, METH_VARARGS, "speculation_comm(idx, members): a communicator's slot."},
    {"speculation_reset", speculation_reset, METH_NOARGS, "After an aborted run: this rank's counts start again."},
    {"speculation_arrived", speculation_arrived, METH_VARARGS,
     "speculation_arrived(idx, k): whether every member arrived at call k (idx -1: a lane is free)."},
    {"speculation_duties", speculation_duties, METH_NOARGS,
     "speculation_duties() -> [(idx, k, count, format, op)]: calls that members entered ahead of this rank."},
    {"speculation_try_proxy", speculation_try_proxy, METH_VARARGS,
     "speculation_try_proxy(idx, k) -> lane or -1: inside call k on idx in this rank's place, if it may."},
    {"speculation_left", speculation_left, METH_VARARGS, "speculation_left(idx, k, lane): the proxy call is made."},
    {"speculation_wait_inside", speculation_wait_inside, METH_O,
     "speculation_wait_inside(after) -> (comm, name, file, line, seconds): a call entered ahead, waiting that long."},
    {"speculation_counts", speculation_counts, METH_NOARGS, "Calls entered ahead, and calls that waited first."},
    {"speculation_new_slot", speculation_new_slot, METH_NOARGS, "A slot number not given before in this pool."},
    {"agree_on", agree_on, METH_VARARGS,
     "agree_on(group, name, agreed_code): the members' agreement on a collective, as _collectives.agree's."},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tracer", "mpinb's traced MPI calls in C (see _tracer.c).", -1, functions,
};

PyMODINIT_FUNC PyInit__tracer(void) {
    if (import_mpi4py() < 0) return NULL;
    if (PyType_Ready(&MethodType) < 0 || PyType_Ready(&HeldType) < 0) return NULL;
    str_mpinb_id = PyUnicode_InternFromString("_mpinb_id");
    str_slot = PyUnicode_InternFromString("_mpinb_slot");
    if (str_mpinb_id == NULL || str_slot == NULL) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddStringConstant(module, "MPI_VENDOR", MPI_VENDOR) < 0) return NULL;
    if (PyModule_AddIntConstant(module, "BOARD_WORDS_PER_RANK", LANES * SLOT_WORDS + MAX_COMMS) < 0 ||
        PyModule_AddIntConstant(module, "BOARD_SLOTS", MAX_COMMS) < 0)
        return NULL;
    return module;
}
