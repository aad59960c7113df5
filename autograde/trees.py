"""Walking and removing folder trees that a student's code built: without recursion, with
two file descriptors at most, whatever their depth (a tree 100,000 levels deep has paths
far longer than PATH_MAX and would exhaust Python's stack in os.walk or shutil.rmtree).
"""
import os
import stat

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _empty(fd):
    """Remove every non-folder in the folder `fd`; returns the names of its folders (each
    opened up to its owner first: the student's code may have made it read-only)."""
    folders = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    os.chmod(entry.name, 0o700, dir_fd=fd)
                    folders.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=fd)
            except OSError:
                pass
    return folders


def remove_tree(path):
    """Remove `path` and everything under it (a file or a symlink: just it). Never follows
    a symlink; errors (a file it may not remove) are skipped."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(info.st_mode):
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        os.chmod(path, 0o700)
        fd = os.open(path, _DIRECTORY)
    except OSError:
        return
    names, todo = [], [_empty(fd)]
    try:
        while todo:
            if todo[-1]:
                name = todo[-1].pop()
                try:
                    child = os.open(name, _DIRECTORY, dir_fd=fd)
                except OSError:
                    continue
                os.close(fd)
                fd = child
                names.append(name)
                todo.append(_empty(fd))
                continue
            todo.pop()
            if not names:
                break
            parent = os.open("..", _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = parent
            try:
                os.rmdir(names.pop(), dir_fd=fd)
            except OSError:
                pass
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass


def entries(root, same_device=True):
    """{path: st_mode} of everything under `root` (not `root` itself), without recursion;
    with `same_device`, not descending into other mounts (nor into symlinks)."""
    device = os.lstat(root).st_dev
    found, todo = {}, [root]
    while todo:
        folder = todo.pop()
        try:
            listing = list(os.scandir(folder))
        except OSError:
            continue
        for entry in listing:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[entry.path] = info.st_mode
            if stat.S_ISDIR(info.st_mode) and (not same_device or info.st_dev == device):
                todo.append(entry.path)
    return found
