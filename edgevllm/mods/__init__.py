"""mods"""
