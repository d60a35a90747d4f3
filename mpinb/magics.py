def load_ipython_extension(ip): pass
def unload_ipython_extension(ip): pass
