/* A new local artifact written durably in one call that holds no GIL.
 *
 * ``write_new(path, data, mode, directory)`` does what ``stores.artifacts.local._write_new_py``
 * does: create ``path`` exclusively, write all of ``data``, give it exactly ``mode``, fsync it,
 * close it, then fsync ``directory``. Why in C: each ``os`` call releases the GIL for its system
 * call and must take it back after, and a writer thread waits for it up to the switch interval
 * (5 ms) each time the event loop's thread is running the agent. Eight such waits made one write
 * take 1.5-25 ms against 0.5 ms on an idle thread (docs/performance.md, issue 35 item 7); here
 * the thread gives the GIL up once and takes it back once.
 *
 * Returns True once file and directory are durable, False when a file is at ``path`` already
 * (nothing written). Raises OSError (FileNotFoundError when ``directory`` is missing: the caller
 * makes it and calls again). A write that fails after the create removes the file it created,
 * unless another process has meanwhile replaced it whole (the same identity check as
 * ``_remove_if_still_ours``).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static int
write_all(int fd, const char *data, Py_ssize_t size)
{
    while (size > 0) {
        ssize_t n = write(fd, data, (size_t)size);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        data += n;
        size -= n;
    }
    return 0;
}

static int
fsync_retrying(int fd)
{
    int rc;
    do {
        rc = fsync(fd);
    } while (rc < 0 && errno == EINTR);
    return rc;
}

/* remove ``path`` if it is still the file open as ``fd`` */
static void
remove_if_still_ours(const char *path, int fd)
{
    struct stat ours, there;
    if (fstat(fd, &ours) == 0 && stat(path, &there) == 0 && ours.st_dev == there.st_dev
        && ours.st_ino == there.st_ino)
        unlink(path);
}

/* 0: written and synced; 1: a file is there already; -1: the file failed, -2: the directory
 * failed (errno set) */
static int
write_new_nogil(const char *path, const char *data, Py_ssize_t size, int mode,
                const char *directory)
{
    int fd, dir_fd, saved;
    do {
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return errno == EEXIST ? 1 : -1;
    if (write_all(fd, data, size) < 0 || fchmod(fd, (mode_t)mode) < 0 || fsync_retrying(fd) < 0) {
        saved = errno;
        remove_if_still_ours(path, fd);
        close(fd);
        errno = saved;
        return -1;
    }
    if (close(fd) < 0 && errno != EINTR)
        return -1;
    dir_fd = open(directory, O_RDONLY | O_CLOEXEC);
    if (dir_fd < 0)
        return -2;
    if (fsync_retrying(dir_fd) < 0) {
        saved = errno;
        close(dir_fd);
        errno = saved;
        return -2;
    }
    close(dir_fd);
    return 0;
}

static PyObject *
write_new(PyObject *self, PyObject *args)
{
    const char *path, *directory;
    Py_buffer data;
    int mode, rc, saved;
    (void)self;
    if (!PyArg_ParseTuple(args, "yy*iy:write_new", &path, &data, &mode, &directory))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = write_new_nogil(path, (const char *)data.buf, data.len, mode, directory);
    saved = errno;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (rc == 1)
        Py_RETURN_FALSE;
    if (rc < 0) {
        errno = saved;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, rc == -1 ? path : directory);
    }
    Py_RETURN_TRUE;
}

/* file_size(path) -> the size of the regular file at ``path``, or -1 (none there, or not a
 * regular file). The GIL is kept: a stat of a cached inode takes microseconds, and giving the
 * GIL up for it (as ``os.stat`` does) made the event loop's thread wait for the GIL to come back
 * while the writer threads held it, once a recorded step (issue 35 item 7). */
static PyObject *
file_size(PyObject *self, PyObject *args)
{
    const char *path;
    struct stat st;
    (void)self;
    if (!PyArg_ParseTuple(args, "y:file_size", &path))
        return NULL;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return PyLong_FromLong(-1);
    return PyLong_FromLongLong((long long)st.st_size);
}

static PyMethodDef methods[] = {
    {"file_size", file_size, METH_VARARGS, "file_size(path: bytes) -> int (-1: no regular file)"},
    {"write_new", write_new, METH_VARARGS,
     "write_new(path: bytes, data: bytes, mode: int, directory: bytes) -> bool"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_durable_native", NULL, -1, methods,
};

PyMODINIT_FUNC
PyInit__durable_native(void)
{
    return PyModule_Create(&module);
}
